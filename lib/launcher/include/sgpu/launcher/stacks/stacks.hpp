#pragma once
// Every rank's stack, taken from outside without stopping the job (py-spy
// for Python ranks, eu-stack for native ones), and the report that answers
// "who is stuck, and where?": ranks with the same stack grouped, the odd
// ones out named. Used by --hang-timeout, --timeout and `sgpu stacks`.
//
// The pure half (parsing a tool's output, grouping, the verdict, the text
// and JSON) is apart from the half that runs the tools on the event loop.
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

struct StackFrame {
  std::string name;  // the function
  std::string file;  // short: "train.py", "torch/distributed/distributed_c10d.py"; "" for a native frame without one
  std::string path;  // full path as the tool gave it
  int line = 0;
  bool operator==(const StackFrame&) const = default;
};

struct ThreadStack {
  std::string name;  // "MainThread"; "" when the tool gives none
  long long tid = 0;
  bool main = false;               // the process's own thread (tid == pid)
  std::vector<StackFrame> frames;  // innermost first
  bool operator==(const ThreadStack&) const = default;
};

struct RankStack {
  int rank = 0;
  std::string host;  // "" on one node
  int pid = 0;
  std::string tool;  // "py-spy", "eu-stack"
  std::vector<ThreadStack> threads;
  std::string error;  // why it could not be read ("" when it was)
  bool read() const { return error.empty(); }
  // The thread the report groups by: the main thread, else the first.
  const ThreadStack* main_thread() const;
};

// py-spy's `dump --json`: one entry per thread. Throws sgpu::Error when the
// text is not that.
std::vector<ThreadStack> parse_py_spy_json(std::string_view text, int pid);
// eu-stack's text ("TID 12:" then "#0  0x... name" lines).
std::vector<ThreadStack> parse_eu_stack(std::string_view text, int pid);

// A frame of the Python library or an installed package (site-packages,
// dist-packages, lib/pythonX.Y, "<frozen ...>") or a native one: not the
// user's code.
bool is_library_frame(const StackFrame& frame);
// A frame inside a collective or a wait on the other ranks
// (torch.distributed, NCCL, gloo, MPI).
bool is_collective_frame(const StackFrame& frame);

struct StackGroup {
  std::vector<int> ranks;      // ascending
  std::string summary;         // "all_reduce  distributed_c10d.py:1536 <- step  train.py:20"
  std::string user_frame;      // "train.py:20 in step"; "" when no frame is the user's
  bool in_collective = false;  // the innermost frames wait on the other ranks
  bool odd = false;            // an odd one out
};

struct StackReport {
  int ranks = 0;                   // every rank asked for
  std::vector<StackGroup> groups;  // largest first
  std::vector<int> unreadable;     // ranks whose stack could not be read
  std::vector<int> odd_ranks;      // the odd ones out, ascending
  std::string verdict;             // one sentence: who is stuck, and where
};

// Groups ranks by their main thread's stack and finds the odd ones out: the
// groups that are not in a collective while others wait in one, else the
// groups smaller than the largest, at another line of the user's code.
StackReport analyse_stacks(const std::vector<RankStack>& stacks);

// "0-2,4-7".
std::string rank_ranges(const std::vector<int>& ranks);

// The report for a console: a line per group, then the odd ones out.
std::string format_stack_report(const StackReport& report, const std::vector<RankStack>& stacks);
// One rank's stacks, every thread, for rank-<r>.txt.
std::string format_rank_stack(const RankStack& stack);
// Every rank's frames and the grouping as one document (`-o json`, stacks.json).
nlohmann::json stacks_json(const StackReport& report, const std::vector<RankStack>& stacks);
// RankStacks from stacks_json()'s "ranks" (what an agent sends its launcher);
// throws sgpu::Error when it is not that.
std::vector<RankStack> rank_stacks_from_json(const nlohmann::json& ranks);
nlohmann::json rank_stacks_to_json(const std::vector<RankStack>& stacks);
// rank_stacks_to_json() as text of at most `limit` bytes: other threads,
// then outer frames are dropped until it fits (a node's answer is one frame).
std::string fit_stacks(std::vector<RankStack> stacks, std::size_t limit);

// --- Taking them (on the event loop) ---

struct StackTarget {
  int rank = 0;
  int pid = 0;
  std::string host;
};

struct StackOptions {
  bool native = false;                    // py-spy --native: the native frames too
  std::chrono::milliseconds limit{4000};  // per rank, all ranks at once
  // Where py-spy is: $SGPU_PY_SPY, else next to one of these programs (the
  // job's interpreter, sgpu itself: the wheel installs both in one bin/),
  // else on PATH.
  std::vector<std::string> look_beside;
  env::Environment environment;
};

// Options for a job whose ranks run `program` (the interpreter or the
// executable), looking beside it and beside sgpu itself.
StackOptions stack_options_for(const std::string& program, const env::Environment& environment);

// The py-spy to run, or nullopt.
std::optional<std::string> find_py_spy(const StackOptions& options);
// What to tell the user when it is missing.
std::string py_spy_missing_message(const StackOptions& options);

// Takes every target's stack in parallel; `done` gets one RankStack per
// target, in the targets' order, within about options.limit.
void take_stacks(boost::asio::io_context& io, const std::vector<StackTarget>& targets, const StackOptions& options,
                 std::function<void(std::vector<RankStack>)> done);

// What a hang or the timeout does before the teardown, and `sgpu stacks`:
// the ranks' stacks taken, analysed, kept in the run directory and printed
// on stderr under `headline`; then `done` with the report and where it is
// kept ("" when it could not be written).
struct Inspection {
  StackReport report;
  std::vector<RankStack> stacks;
  std::string dir;
  double seconds = 0;  // how long taking them took
};
void inspect_ranks(boost::asio::io_context& io, const std::string& run_dir, const std::string& headline,
                   const std::vector<StackTarget>& targets, const StackOptions& options,
                   std::function<void(Inspection)> done);
// inspect_ranks' second half, for stacks taken elsewhere (every node's):
// analysed, kept, printed.
Inspection present_stacks(const std::string& run_dir, const std::string& headline, std::vector<RankStack> stacks,
                          double seconds);
// How a running job's stacks are taken on demand (`sgpu stacks`): the
// backend that runs it gives one; `native` adds native frames.
using StacksTaker = std::function<void(bool native, std::function<void(const Inspection&)> done)>;

// The text inspect_ranks prints: the headline, the groups and the verdict.
std::string format_inspection(const std::string& headline, const Inspection& inspection);

// Writes <run_dir>/stacks/<taken>/{report.txt,stacks.json,rank-<r>.txt};
// returns that directory. Throws sgpu::Error when it cannot.
std::string write_stacks(const std::string& run_dir, std::chrono::system_clock::time_point taken,
                         const StackReport& report, const std::vector<RankStack>& stacks);

}  // namespace sgpu::launcher
