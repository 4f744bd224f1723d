#pragma once
// What a run is, as `sgpu runs`, `status`, `wait`, `cancel` and `prune` see
// it, and the pure rules behind them: the state a recorded end maps to, how a
// reader tells a lost run (the supervisor's lock is free but it recorded no
// end), which RUN a user meant (full id, unique prefix, `last`), and which
// runs a prune removes. No I/O.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/env/exit_code.hpp"

namespace sgpu::launcher {

// Unknown: its state.json cannot be believed (not JSON, a field missing or
// out of range); RunInfo::problem says what.
enum class RunState { Running, Succeeded, Failed, TimedOut, Cancelled, Lost, Unknown, Hung, Preempted };

// "running", "succeeded", "failed", "timed-out", "cancelled", "lost", "unknown", "preempted".
std::string_view run_state_name(RunState state);
std::optional<RunState> parse_run_state(std::string_view name);

// The state a supervisor records when its job ends. Interrupted (Ctrl-C,
// `sgpu cancel`, SIGHUP to sgpu) is cancelled; Preempted (a SIGTERM from the
// system, SLURM's preemption or cancel) is preempted.
RunState final_state(env::JobEnd::Kind kind);

// The state a recorded end's name (events.jsonl's run_finished, summary.json's
// "status": "completed", "rank_failed", ...) maps to; nullopt for no such name.
std::optional<RunState> state_of_end_name(std::string_view name);

// What is wrong with a state.json's record, "" when nothing: "state" (a known
// state's name), "started_at" (a time) and "world_size" are required;
// world_size, nnodes, sgpu_pid, exit_code and duration_s must be in range,
// every field of its type.
std::string state_record_problem(const nlohmann::json& record);

// What a reader reports: a run recorded as running whose lock nobody holds
// lost its supervisor (killed, machine rebooted) before it recorded an end.
RunState observed_state(RunState recorded, bool lock_held);

// The run a user named: a full id, a unique prefix of one, or "last" (the
// newest). `ids_newest_first` are the runs of the runs directory `root`.
// Throws sgpu::Error (exit 2) when none or several match, listing the candidates.
std::string resolve_run_id(const std::vector<std::string>& ids_newest_first, std::string_view query,
                           const std::string& root);

// A run as prune sees it.
struct PruneCandidate {
  std::string id;
  bool finished = false;                        // not running (lost runs are finished)
  std::chrono::system_clock::time_point ended;  // or started, for a lost run
};
struct PruneRule {
  std::optional<int> keep;                         // keep the newest N runs (running ones count)
  std::optional<std::chrono::seconds> older_than;  // remove only runs that ended longer ago
};
// The ids to remove, newest first: finished runs beyond the newest `keep`
// that ended before now - `older_than`; a rule left unset does not hold a
// run back. Never a running run.
std::vector<std::string> select_prune(const std::vector<PruneCandidate>& newest_first, const PruneRule& rule,
                                      std::chrono::system_clock::time_point now);

// "2026-12-02T11:53:01.042Z" back to a time point; nullopt when malformed.
std::optional<std::chrono::system_clock::time_point> parse_iso_time(std::string_view text);

}  // namespace sgpu::launcher

namespace sgpu::launcher {
// The run directory's management files (README "Run directory").
inline constexpr const char* kRunStateFile = "state.json";       // written atomically: start and end
inline constexpr const char* kRunLockFile = "lock";              // flock'd by the supervisor while it lives
inline constexpr const char* kRunCancelFile = "cancel";          // the first `sgpu cancel` creates it
inline constexpr const char* kRunConsoleFile = "console.log";    // a detached run's console
inline constexpr const char* kRunMetricsFile = "metrics.jsonl";  // the nodes' samples (--sample-every)
}  // namespace sgpu::launcher
