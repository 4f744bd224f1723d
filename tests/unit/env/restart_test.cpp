#include <csignal>

#include <doctest/doctest.h>

#include "sgpu/env/restart.hpp"

using namespace sgpu::env;

TEST_CASE("env::restart_backoff") {
  struct Row {
    const char* what;
    double base;
    int restart;
    double wait;
  };
  Row rows[] = {
      {"the first restart waits the base", 1, 1, 1},
      {"each restart doubles it", 1, 2, 2},
      {"and again", 1, 4, 8},
      {"capped at 60s", 1, 7, 60},
      {"still capped far later", 1, 1000, 60},
      {"a fractional base", 0.5, 3, 2},
      {"a zero base restarts at once", 0, 5, 0},
      {"a base above the cap is capped too (the spec refuses one)", 90, 3, 60},
      {"restart 0 is no restart", 1, 0, 0},
  };
  for (const auto& row : rows) {
    SUBCASE(row.what) { CHECK(restart_backoff(Seconds{row.base}, row.restart).count() == doctest::Approx(row.wait)); }
  }
}

TEST_CASE("env::restartable") {
  using K = JobEnd::Kind;
  auto end = [](K kind, ExitStatus status = {}) {
    JobEnd e;
    e.kind = kind;
    e.status = status;
    return e;
  };
  auto replaced = [&] {
    auto e = end(K::NodeLost);
    e.replaced = true;
    return e;
  };
  struct Row {
    const char* what;
    JobEnd end;
    bool restartable;
  };
  Row rows[] = {
      {"a rank that exited 1", end(K::RankFailed, ExitStatus::exited(1)), true},
      {"a rank killed by a signal", end(K::RankFailed, ExitStatus::killed(SIGSEGV)), true},
      {"a rank whose program was not found (127)", end(K::RankFailed, ExitStatus::exited(127)), false},
      {"a rank whose program was not executable (126)", end(K::RankFailed, ExitStatus::exited(126)), false},
      {"the timeout", end(K::TimedOut), false},
      {"a signal to sgpu", end(K::Interrupted), false},
      {"a rank that could not be spawned", end(K::SpawnFailed), false},
      {"the scheduler", end(K::StoppedByScheduler), false},
      {"a run that never started", end(K::NotStarted), false},
      {"success", end(K::Completed), false},
      {"a lost node with no spare", end(K::NodeLost), false},
      {"a lost node a spare replaces", replaced(), true},
  };
  for (const auto& row : rows) {
    SUBCASE(row.what) { CHECK(restartable(row.end) == row.restartable); }
  }
}
