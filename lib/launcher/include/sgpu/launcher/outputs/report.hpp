#pragma once
// What a finished run tells its user: the facts gathered after the last rank
// exited (RunReport), and the text printed on stderr from them: a headline,
// a table of ranks and the root cause. Pure: the files are read elsewhere.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/outputs/error_file.hpp"
#include "sgpu/launcher/outputs/signal_before.hpp"
#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

struct RankReport {
  int rank = 0;
  std::string host;
  int pid = -1;                           // -1: never started
  std::optional<env::ExitStatus> status;  // nullopt: never started
  bool terminated_by_sgpu = false;
  Clock::time_point started{};
  Clock::time_point ended{};
  std::string result_file;         // where its $SGPU_RESULT_FILE is, when it wrote one (any size, any bytes)
  nlohmann::ordered_json binding;  // its CPUs and NUMA node (binding_json), null when none was read
};

// Why the job ended, with the evidence: for a failed rank its traceback (from
// its error file) or the last lines of its stderr.
struct RootCause {
  env::JobEnd::Kind kind = env::JobEnd::Kind::Completed;
  int rank = -1;        // the failed rank, or the one that could not start
  std::string message;  // one line: "RuntimeError: boom", "exit 7", "the job ran past --timeout 1s"
  std::string details;  // the traceback, or the last lines of the rank's stderr
  std::string source;   // where details come from: "error_file", "stderr", "sgpu"
  std::string source_path;
  std::optional<ErrorFileRecord> record;  // the rank's error file, when it wrote one
};

// One attempt of a run with restarts: how it ended and why.
struct AttemptReport {
  int attempt = 0;
  env::JobEnd end;
  int exit_code = 0;
  Clock::time_point started{};
  Clock::time_point ended{};
  std::vector<RankReport> ranks;  // its ranks' pids and endings (results are the last attempt's only)
  std::optional<RootCause> root_cause;
  std::vector<std::string> nodes;  // multi-node: each node rank's host; empty on one node
};

// The MLflow run the launch was tracked as (README "Experiment tracking").
struct TrackingLink {
  std::string run_id;
  std::string url;
};

struct RunReport {
  std::string run_id;
  std::string run_dir;
  env::JobEnd end;
  int exit_code = 0;
  Clock::time_point started{};
  Clock::time_point ended{};
  std::optional<env::Seconds> timeout;
  std::vector<RankReport> ranks;  // every rank of the job, in rank order
  // Each rank's result as compact JSON text, in rank order ("null": none, or
  // left out of the summary); kept apart from the ranks so that nothing
  // copies a rank's row with its result (summary.hpp: result_json).
  std::vector<std::string> results;
  std::optional<RootCause> root_cause;
  std::vector<AttemptReport> attempts;            // every attempt in order; the last is the run's own
  std::vector<std::string> warnings;              // e.g. a log file that could not be written in full
  std::optional<TrackingLink> mlflow;             // nullopt: not tracked
  std::optional<SignalBeforeSent> signal_before;  // --signal-before, once it fired
  std::vector<Exclusion> excluded;                // --health-gate: the GPUs it left out
};

// "ok", "failed", "terminated_by_sgpu", "not_started", "lost" (started on a
// node that was lost: how it ended is unknown) (the JSON spelling).
std::string rank_verdict_name(const RankReport& r);
// "0", "7", "SIGKILL", "-" (never started).
std::string exit_text(const std::optional<env::ExitStatus>& status);
double duration_seconds(Clock::time_point from, Clock::time_point to);

// The one sentence that says how the run ended (no trailing newline).
std::string headline(const RunReport& report);
// Aligned table of ranks; above `max_rows` ranks, the ranks that did not
// succeed come first and the rest are counted in one last line.
std::string format_rank_table(const RunReport& report, std::size_t max_rows = 32);
// Everything printed on stderr at the end.
std::string format_report(const RunReport& report);

// Text a rank wrote (its error file), made safe to show on a terminal: C0
// controls (ESC, CR, BEL, ...) and DEL become \xNN (\r, \n, \t as such), the C1
// controls (U+0080-U+009F) \u00NN, so no escape sequence changes the screen or the
// title and no CR or LF spoofs an "sgpu:" line. `keep_newlines`: a traceback's
// LF and TAB stay as they are.
std::string escape_controls(std::string_view text, bool keep_newlines);

// The root cause's one-line message for a rank that failed (pure).
std::string failure_message(int rank, const std::string& host, int pid, const env::ExitStatus& status);

}  // namespace sgpu::launcher
