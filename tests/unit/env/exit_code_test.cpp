#include <cerrno>
#include <csignal>
#include <string>

#include <doctest/doctest.h>

#include "sgpu/env/exit_code.hpp"

using namespace sgpu::env;

TEST_CASE("env::job_exit_code") {
  using K = JobEnd::Kind;
  struct Row {
    const char* what;
    JobEnd end;
    int code;
  };
  auto failed = [](ExitStatus s) {
    JobEnd e;
    e.kind = K::RankFailed;
    e.rank = 2;
    e.status = s;
    return e;
  };
  auto interrupted = [](int sig) {
    JobEnd e;
    e.kind = K::Interrupted;
    e.signal = sig;
    return e;
  };
  auto spawn = [](int err) {
    JobEnd e;
    e.kind = K::SpawnFailed;
    e.spawn_errno = err;
    return e;
  };
  JobEnd timed_out;
  timed_out.kind = K::TimedOut;
  const Row rows[] = {
      {"all ranks ok", JobEnd{}, 0},
      {"rank exit 1", failed(ExitStatus::exited(1)), 1},
      {"rank exit 3 is kept, not flattened to 1", failed(ExitStatus::exited(3)), 3},
      {"rank killed by SIGKILL", failed(ExitStatus::killed(SIGKILL)), 137},
      {"rank killed by SIGSEGV", failed(ExitStatus::killed(SIGSEGV)), 139},
      {"timeout", timed_out, 124},
      {"Ctrl-C", interrupted(SIGINT), 130},
      {"SIGTERM to sgpu", interrupted(SIGTERM), 143},
      {"entrypoint not found", spawn(ENOENT), 127},
      {"entrypoint not executable", spawn(EACCES), 126},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    CHECK(job_exit_code(row.end) == row.code);
  }
}

TEST_CASE("env::ExitStatus") {
  CHECK(ExitStatus::from_wait_status(3 << 8) == ExitStatus::exited(3));
  CHECK(ExitStatus::from_wait_status(SIGTERM) == ExitStatus::killed(SIGTERM));
  CHECK(ExitStatus::exited(0).success());
  CHECK_FALSE(ExitStatus::killed(SIGTERM).success());
  CHECK(ExitStatus::exited(3).describe() == "exit 3");
  CHECK(ExitStatus::killed(SIGKILL).describe() == "SIGKILL (signal 9)");
  CHECK(signal_name(SIGINT) == "SIGINT");
}

TEST_CASE("env::rank_verdict") {
  CHECK(rank_verdict(std::nullopt, false) == RankVerdict::Running);
  CHECK(rank_verdict(ExitStatus::exited(0), true) == RankVerdict::Succeeded);
  CHECK(rank_verdict(ExitStatus::exited(1), false) == RankVerdict::Failed);
  CHECK(rank_verdict(ExitStatus::killed(SIGTERM), true) == RankVerdict::TerminatedBySgpu);
}

TEST_CASE("env::end_class") {
  using K = JobEnd::Kind;
  using C = EndClass;
  const std::pair<K, C> rows[] = {
      {K::Completed, C::Succeeded},
      {K::RankFailed, C::Failed},
      {K::TimedOut, C::TimedOut},
      {K::Interrupted, C::StoppedFromOutside},
      {K::SpawnFailed, C::Failed},
      {K::NodeLost, C::Failed},
      {K::StoppedByScheduler, C::StoppedFromOutside},
      {K::NotStarted, C::Failed},
  };
  for (const auto& [kind, cls] : rows) {
    const std::string name = job_end_name(kind);  // clang 14 cannot capture a structured binding
    CAPTURE(name);
    CHECK(end_class(kind) == cls);
  }
}
