#pragma once
// Restarts (`--max-restarts N`): which endings a new attempt can fix, and how
// long to wait before it. Pure functions, no I/O.
#include "sgpu/env/duration.hpp"
#include "sgpu/env/exit_code.hpp"

namespace sgpu::env {

// The longest wait between two attempts, however many came before.
inline constexpr Seconds kMaxRestartBackoff{60};

// The wait before restart number `restart` (1 for the first): `base`, doubled
// for each restart before it, capped at kMaxRestartBackoff (the spec refuses
// a `base` above it: README promises the cap). A zero base restarts at once.
Seconds restart_backoff(Seconds base, int restart);

// A rank that failed may succeed on another try (a flaky network, a lost
// GPU); the timeout, a signal to sgpu, a scheduler's verdict, an entrypoint
// that could not be started (126/127) and a run that never started will not.
bool restartable(const JobEnd& end);

}  // namespace sgpu::env
