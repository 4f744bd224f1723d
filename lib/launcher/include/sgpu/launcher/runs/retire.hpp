#pragma once
// Retention at launch (--keep-runs), paid by no launch: a finished run
// beyond the newest `keep` is retired by renaming it into <root>/.trash (one
// metadata operation), a bounded number per launch; the next launch takes
// one for its own directory (runs/recycle.hpp); what is left in the trash
// (but one retired run, for the next launch) is deleted by a detached,
// low-priority process once a batch has gathered (or
// when more runs wait to be retired than one launch takes), after the
// launching sgpu has written everything it reports.
#include <cstddef>
#include <string>
#include <vector>

namespace sgpu::launcher {

// The trash directory's name under the runs directory (hidden: run_ids skips it).
inline constexpr const char* kRunsTrashDir = ".trash";

struct RetireOutcome {
  std::size_t retired = 0;  // renamed into the trash by this call
  bool more = false;        // finished runs beyond `keep` were left for lack of `limit`
  std::vector<std::string> errors;
};

// How many of `count` directory names, newest first (they sort by start
// time, to the second), the newest `keep` runs span; `is_run(i)` says
// whether the i-th is a run's (retire_runs: its name is an id's; one
// starting, with no state.json yet, counts: a run a moment later). The names
// past it are the ones retention may retire, those with a state.json. Pure
// but for `is_run`.
template <class IsRun>
std::size_t kept_span(std::size_t count, int keep, IsRun is_run) {
  std::size_t i = 0;
  for (int counted = 0; i < count && counted < keep; ++i)
    if (is_run(i)) ++counted;
  return i;
}

// Renames at most `limit` finished runs beyond the newest `keep` of `root`
// into its trash, oldest first. A run whose lock is held (running) stays.
RetireOutcome retire_runs(const std::string& root, int keep, std::size_t limit);

// What a launch that took a retired run's directory moved out of it goes
// into the trash as .old-<its run id>-<n>, n from 0 (runs/recycle.hpp).
inline constexpr const char* kOldPrefix = ".old-";

// How many launches' leftovers wait in the trash: retired runs, and what
// each launch moved out of the one it took (its .old-<id>-0 counts).
std::size_t trash_size(const std::string& root);

// Retires every finished run beyond `keep` (none for INT_MAX) and deletes
// the trash, now: all of it (sgpu prune), or all but its newest retired run
// when `spare_newest`, for the next launch to take for its directory (a
// launch's deleter). One deleter at a time (a lock on the trash: a second
// caller leaves it to the first).
// Returns the problems met ("<path>: <why>").
std::vector<std::string> empty_trash(const std::string& root, int keep, bool spare_newest = false);

// empty_trash(root, keep, true) in a child process that outlives this one:
// its own process group (Ctrl-C is for the job), SIGHUP ignored,
// stdin/stdout/stderr on /dev/null (a reader of sgpu's output never waits
// for it), every other descriptor closed (it must not hold the run's lock),
// low CPU and I/O priority (nice 10, best effort level 7). Nothing is
// reported: what it leaves, the next one takes.
void empty_trash_detached(const std::string& root, int keep);

}  // namespace sgpu::launcher
