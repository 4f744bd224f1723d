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
    case JobEnd::Kind::Hung:
      return kExitTimeout;
    case JobEnd::Kind::Interrupted:
      return 128 + end.signal;
    case JobEnd::Kind::Preempted:
      return 128 + (end.signal > 0 ? end.signal : SIGTERM);
    case JobEnd::Kind::SpawnFailed:
      return end.spawn_errno == ENOENT ? kExitNotFound : kExitNotExecutable;
    case JobEnd::Kind::NodeLost:
      return end.cause_code.value_or(1);
    case JobEnd::Kind::StoppedByScheduler:
      if (end.time_limit) return kExitTimeout;
      return 128 + (end.signal > 0 ? end.signal : SIGTERM);
    case JobEnd::Kind::NotStarted:
      return end.cause_code.value_or(1);
  }
  return 1;
}

EndClass end_class(JobEnd::Kind kind) {
  switch (kind) {
    case JobEnd::Kind::Completed:
      return EndClass::Succeeded;
    case JobEnd::Kind::TimedOut:
      return EndClass::TimedOut;
    case JobEnd::Kind::Hung:
      return EndClass::Hung;
    case JobEnd::Kind::Interrupted:
    case JobEnd::Kind::StoppedByScheduler:
    case JobEnd::Kind::Preempted:
      return EndClass::StoppedFromOutside;
    case JobEnd::Kind::RankFailed:
    case JobEnd::Kind::SpawnFailed:
    case JobEnd::Kind::NodeLost:
    case JobEnd::Kind::NotStarted:
      break;
  }
  return EndClass::Failed;
}

const char* job_end_name(JobEnd::Kind kind) {
  switch (kind) {
    case JobEnd::Kind::Completed:
      return "completed";
    case JobEnd::Kind::RankFailed:
      return "rank_failed";
    case JobEnd::Kind::TimedOut:
      return "timed_out";
    case JobEnd::Kind::Interrupted:
      return "interrupted";
    case JobEnd::Kind::SpawnFailed:
      return "spawn_failed";
    case JobEnd::Kind::NodeLost:
      return "node_lost";
    case JobEnd::Kind::StoppedByScheduler:
      return "stopped_by_scheduler";
    case JobEnd::Kind::NotStarted:
      return "not_started";
    case JobEnd::Kind::Hung:
      return "hung";
    case JobEnd::Kind::Preempted:
      return "preempted";
  }
  return "unknown";
}

std::string describe_end(const JobEnd& end) {
  auto on = [&] { return end.host.empty() ? std::string() : " on " + end.host; };
  switch (end.kind) {
    case JobEnd::Kind::Completed:
      return "every rank exited 0";
    case JobEnd::Kind::RankFailed:
      return fmt::format("rank {}{} failed first: {}", end.rank, end.host.empty() ? "" : fmt::format(" ({})", end.host),
                         end.status.describe());
    case JobEnd::Kind::TimedOut:
      return "the job timed out";
    case JobEnd::Kind::Interrupted:
      return fmt::format("interrupted by {}{}", signal_name(end.signal), on());
    case JobEnd::Kind::SpawnFailed:
      return fmt::format("cannot start rank {}{}: {}", end.rank, on(), end.reason);
    case JobEnd::Kind::NodeLost:
      return fmt::format("node {} was lost: {}", end.host, end.reason);
    case JobEnd::Kind::StoppedByScheduler:
      return end.reason.empty() ? std::string("the scheduler stopped the job") : end.reason;
    case JobEnd::Kind::NotStarted:
      return end.reason.empty() ? std::string("the job could not start") : end.reason;
    case JobEnd::Kind::Hung:
      return end.reason.empty() ? std::string("the job hung: no rank made progress") : end.reason;
    case JobEnd::Kind::Preempted:
      return end.reason.empty() ? fmt::format("preempted ({}{})", signal_name(end.signal), on()) : end.reason + on();
  }
  return "the job ended";
}

std::string describe_end_and_code(const JobEnd& end) {
  if (end.kind == JobEnd::Kind::Completed) return describe_end(end);
  return fmt::format("{} (exit code {})", describe_end(end), job_exit_code(end));
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
