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

// Why a job ended: the first of these to happen is recorded, a backend may
// add what only it knows (how an ssh session ended, what SLURM did), and
// job_exit_code() turns the record into sgpu's exit code. Nothing else sets
// an exit code: the summary, the console and the agents all read this one.
struct JobEnd {
  // NodeLost: a node's agent stopped answering (killed, network cut) or
  // could not go on; its ranks' fate is unknown.
  // StoppedByScheduler: the scheduler ended the job (SLURM's time limit,
  // scancel, preemption), whatever the ranks then did.
  // NotStarted: the job could not start (a host unreachable, the
  // rendezvous failed, an allocation refused); `cause_code` says why.
  // Hung: no rank made progress (output or heartbeat) for --hang-timeout;
  // `reason` holds the verdict of the ranks' stacks. Exit 124, as a timeout.
  // Preempted: stopped from outside by the system, not by a user: a SIGTERM
  // to sgpu that no `sgpu cancel` sent, SLURM's preemption or a cancel of
  // the allocation; `signal` is the signal that stopped it (exit 128+N).
  enum class Kind {
    Completed,
    RankFailed,
    TimedOut,
    Interrupted,
    SpawnFailed,
    NodeLost,
    StoppedByScheduler,
    NotStarted,
    Hung,
    Preempted
  };
  Kind kind = Kind::Completed;
  int rank = -1;      // RankFailed, SpawnFailed
  ExitStatus status;  // RankFailed
  int signal = 0;  // Interrupted, Preempted: the signal sgpu received; StoppedByScheduler: the one the scheduler sent
  int spawn_errno = 0;  // SpawnFailed
  std::string host;     // multi-node: the node where it happened ("" on one node)
  std::string reason;   // NodeLost: what the launcher saw; StoppedByScheduler: what the scheduler did; NotStarted: why;
                        // Hung: the stacks' verdict
  // The exit code the cause itself carries, for the two kinds whose code no
  // rule can derive. NodeLost: what the node's ending means, when its
  // backend knows (ssh's 255 for a lost connection, 128+N for an agent killed
  // by signal N; 1 when unknown). NotStarted: the code of the error that
  // stopped it. job_exit_code() reads it; nothing else does.
  std::optional<int> cause_code;
  bool time_limit = false;  // StoppedByScheduler: the scheduler's time limit (exit 124, as --timeout)
  bool replaced = false;    // NodeLost: a spare takes the node's place (--spares), so a restart may follow
  bool operator==(const JobEnd&) const = default;
};

// The exit code of a job that ended so (README "Exit codes"): the one rule.
int job_exit_code(const JobEnd& end);

// What kind of end it was, for those that sort runs coarsely (`sgpu runs`'
// states, MLflow's run status): stopped from outside is a signal to sgpu or
// the scheduler's doing.
enum class EndClass { Succeeded, Failed, TimedOut, Hung, StoppedFromOutside };
EndClass end_class(JobEnd::Kind kind);

// "rank_failed", "timed_out", ...: the end's name in events.jsonl and summary.json.
const char* job_end_name(JobEnd::Kind kind);

// One sentence for the end, without the exit code: "rank 2 (node1) failed
// first: exit 3", "node b was lost: connection closed". Agents, logs and
// the scheduler's messages use it.
std::string describe_end(const JobEnd& end);
// The same with the code it gives: "... (exit code 3)"; "every rank exited 0".
std::string describe_end_and_code(const JobEnd& end);

// How a rank's ending reads in the report.
enum class RankVerdict { Succeeded, Failed, TerminatedBySgpu, Running };
RankVerdict rank_verdict(const std::optional<ExitStatus>& status, bool terminated_by_sgpu);
const char* to_string(RankVerdict v);

}  // namespace sgpu::env
