#pragma once
// How a process ended, and the rule that turns a job's ending into sgpu's
// own exit code (README "Exit codes"). Pure functions, no I/O.
#include <optional>
#include <string>

namespace sgpu::env {

struct ExitStatus {
  std::optional<int> code;    // set when the process exited
  std::optional<int> signal;  // set when a signal killed it

  static ExitStatus from_wait_status(int wait_status);
  static ExitStatus exited(int c) { return {c, std::nullopt}; }
  static ExitStatus killed(int s) { return {std::nullopt, s}; }

  bool success() const { return code && *code == 0; }
  // The shell's convention: the exit code, or 128+N for signal N.
  int shell_code() const;
  // "exit 3", "SIGKILL (signal 9)".
  std::string describe() const;
  bool operator==(const ExitStatus&) const = default;
};

// "SIGTERM" for 15; "signal 64" for numbers without a name.
std::string signal_name(int signal);

// Why a job ended: the first of these to happen decides sgpu's exit code.
struct JobEnd {
  // NodeLost: a node's agent stopped answering (killed, network cut) or
  // could not go on; its ranks' fate is unknown.
  enum class Kind { Completed, RankFailed, TimedOut, Interrupted, SpawnFailed, NodeLost };
  Kind kind = Kind::Completed;
  int rank = -1;        // RankFailed, SpawnFailed
  ExitStatus status;    // RankFailed
  int signal = 0;       // Interrupted: the signal sgpu received
  int spawn_errno = 0;  // SpawnFailed
  std::string host;     // multi-node: the node where it happened ("" on one node)
  std::string reason;   // NodeLost: what the launcher saw
  bool operator==(const JobEnd&) const = default;
};

int job_exit_code(const JobEnd& end);

// How a rank's ending reads in the report.
enum class RankVerdict { Succeeded, Failed, TerminatedBySgpu, Running };
RankVerdict rank_verdict(const std::optional<ExitStatus>& status, bool terminated_by_sgpu);
const char* to_string(RankVerdict v);

}  // namespace sgpu::env
