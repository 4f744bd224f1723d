#pragma once
// The launch engine: a resolved spec in, a finished run out, for every
// backend alike. It chooses the backend (backend.hpp), lets it check and run
// the job, gives its ranks the run's outputs (console, logs, report,
// summary.json), and returns sgpu's exit code, derived in one place from the
// recorded end. `sgpu launch` is flags -> spec -> launch() or dry_run().
#include <string>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/spec/spec_load.hpp"

namespace sgpu::launcher {

struct LaunchRequest {
  ResolvedSpec resolved;
  env::Environment inherited;
  std::string cwd;
  std::string config;      // the --config file ("" when none), for the dry run
  std::string self_exe;    // this binary (/proc/self/exe)
  bool force_new = false;  // --force-new: a new run even when one with the idempotency key answers
};

// Runs the job; returns sgpu's exit code. Throws sgpu::Error for what stops
// it before it starts (its exit code says why); with `-o json` the summary
// of a run that could not start is printed first.
int launch(LaunchRequest request);

// Prints the plan of every node and starts nothing; returns 0. Problems are
// sgpu::Error with exit code 2.
int dry_run(LaunchRequest request);

}  // namespace sgpu::launcher
