#pragma once
// Watching a run from another process: its rank logs as the console shows
// them (`sgpu logs [-f]`), its end (`sgpu wait`), its cancellation (`sgpu
// cancel`). The end is the supervisor's exit, seen through a pidfd taken
// while its lock was held (so it cannot be a reused pid); new output is seen
// through inotify on the run directory. Both wait on one Asio event loop.
#include <chrono>
#include <cstddef>
#include <optional>
#include <vector>

#include "sgpu/launcher/runs/registry.hpp"

namespace sgpu::launcher {

struct LogOptions {
  std::vector<int> ranks;           // empty: every rank
  bool stderr_only = false;         // else stdout and stderr, each to its own
  std::optional<std::size_t> tail;  // the last N lines of each rank first
  bool follow = false;              // until the run ends
  bool json = false;                // one JSON object a line: rank, stream, line
  bool stdout_to_stderr = false;    // every line to stderr (a launch with -o json keeps stdout for its summary)
};

// Prints the run's rank logs; with `follow`, until the run ends. Returns the
// run's exit code when following (1 for a lost run), else 0.
int print_logs(const RunInfo& run, const LogOptions& options);

// The exit code the run ended with: 1 for a lost run (its supervisor died
// without recording one).
int run_exit_code(const RunInfo& run);

// Blocks until the run ends, or `timeout` passes (nullopt then); returns the
// run as it ended.
std::optional<RunInfo> wait_for_run(const RunInfo& run, std::optional<std::chrono::milliseconds> timeout);

// Ctrl-C for a run elsewhere: the first cancel of a running run sends its
// supervisor SIGTERM (which stops every rank with the grace); a later one,
// or one at the same time, sends nothing, so the grace is never cut short.
// Then waits for the run to end and returns it as it ended.
RunInfo cancel_run(const RunInfo& run);

}  // namespace sgpu::launcher
