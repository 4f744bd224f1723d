#include "sgpu/env/exit_code.hpp"

#include <sys/wait.h>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::env {

ExitStatus ExitStatus::from_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return exited(WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) return killed(WTERMSIG(wait_status));
  return exited(255);
}

int ExitStatus::shell_code() const {
  if (code) return *code;
  if (signal) return 128 + *signal;
  return 255;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev == nullptr) return fmt::format("signal {}", sig);
  return fmt::format("SIG{}", abbrev);
}

std::string ExitStatus::describe() const {
  if (code) return fmt::format("exit {}", *code);
  if (signal) return fmt::format("{} (signal {})", signal_name(*signal), *signal);
  return "unknown";
}

int job_exit_code(const JobEnd& end) {
  switch (end.kind) {
    case JobEnd::Kind::Completed:
      return 0;
    case JobEnd::Kind::RankFailed:
      return end.status.shell_code();
    case JobEnd::Kind::TimedOut:
      return kExitTimeout;
    case JobEnd::Kind::Interrupted:
      return 128 + end.signal;
    case JobEnd::Kind::SpawnFailed:
      return end.spawn_errno == ENOENT ? kExitNotFound : kExitNotExecutable;
    case JobEnd::Kind::NodeLost:
      return 1;
  }
  return 1;
}

RankVerdict rank_verdict(const std::optional<ExitStatus>& status, bool terminated_by_sgpu) {
  if (!status) return RankVerdict::Running;
  if (status->success()) return RankVerdict::Succeeded;
  return terminated_by_sgpu ? RankVerdict::TerminatedBySgpu : RankVerdict::Failed;
}

const char* to_string(RankVerdict v) {
  switch (v) {
    case RankVerdict::Succeeded:
      return "ok";
    case RankVerdict::Failed:
      return "failed";
    case RankVerdict::TerminatedBySgpu:
      return "terminated";
    case RankVerdict::Running:
      return "running";
  }
  return "?";
}

}  // namespace sgpu::env
