#pragma once
// The reader side of run directories: list the runs under a runs directory,
// resolve the RUN a user named, read one run's state and ranks, remove
// finished runs. A run's state comes from its state.json (written atomically
// by the supervisor, outputs/run_state_file.hpp) and, while it says
// "running", from its lock: held means the supervisor lives. Never a PID check.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/launcher/runs/run_state.hpp"

namespace sgpu::launcher {

struct RunInfo {
  std::string id;
  std::string dir;
  RunState state = RunState::Running;  // as observed: lock and record together
  nlohmann::json record;               // state.json as written
  std::optional<std::chrono::system_clock::time_point> started, ended;
  std::optional<int> exit_code;
  int world_size = 0;
  // Why the record is not the whole truth: "<dir>/state.json: 'world_size'
  // is ..." (state Unknown: nothing else is read from it), or that the end
  // came from events.jsonl or summary.json. Empty when state.json says it all.
  std::string problem;
};

// True while some process holds the run's lock (its supervisor).
bool run_lock_held(const std::string& run_dir);

// Run ids have a resolution of one second ("20261202-115301-3fa2c1"): the
// length of the part that names it, and whether two ids share that second.
inline constexpr std::size_t kRunIdSecond = 15;
inline bool same_second(std::string_view a, std::string_view b) {
  return a.size() >= kRunIdSecond && b.size() >= kRunIdSecond && a.substr(0, kRunIdSecond) == b.substr(0, kRunIdSecond);
}

// Directory names under `root`, newest first (ids sort by start time); an
// absent root has none. Reads no run.
std::vector<std::string> run_ids(const std::string& root);

// The run in <root>/<id>, or nullopt when it has no state.json (a run whose
// ranks have not started yet, or a directory that is not a run). A
// state.json that cannot be read or believed gives a run in state Unknown
// with its `problem`: listed like any other, never skipped.
std::optional<RunInfo> read_run(const std::string& root, const std::string& id);

// Runs newest first; at most `limit` of them when given.
std::vector<RunInfo> list_runs(const std::string& root, std::optional<std::size_t> limit = std::nullopt);

// The run RUN names: a run name (env::is_run_name_query: the newest run of
// that --name), else resolve_run_id's rules; throws sgpu::Error.
RunInfo find_run(const std::string& root, const std::string& query);

// One line of `sgpu runs -o json`: run_id, run_dir, state, host, sgpu_pid,
// started_at, ended_at, duration_s (so far, while running), world_size,
// nnodes, exit_code (null until it ends, and for a lost run), entrypoint,
// name and idempotency_key (null when none); problem when there is one.
nlohmann::ordered_json run_json(const RunInfo& run);
// Seconds from start to end (to now while running); nullopt when unknown
// (a lost run, an unreadable one).
std::optional<double> run_duration_s(const RunInfo& run);

// Per-rank state for `sgpu status`: from summary.json once the run ended,
// else from events.jsonl (rank_started, rank_exited).
nlohmann::ordered_json rank_table(const RunInfo& run);

// The newest samples of a run (--sample-every), from the end of its
// metrics.jsonl: "ranks" (rank -> its newest line), "gpus" (its newest line
// per node and GPU), and "stragglers" (the ranks whose newest line says
// so: named this attempt; metrics.jsonl alone is read). Empty
// objects and array when the run was not sampled.
nlohmann::ordered_json newest_samples(const RunInfo& run);

struct PruneOutcome {
  std::vector<std::string> removed;  // ids, newest first
  std::vector<std::string> errors;   // "<dir>: <why>"
};
// Removes the finished runs select_prune picks (only directories with a
// state.json: never a run that is starting or running). With `dry_run`
// lists them and removes nothing.
PruneOutcome prune_runs(const std::string& root, const PruneRule& rule, bool dry_run);

}  // namespace sgpu::launcher
