#include "sgpu/launcher/process/job_control.hpp"

#include <sys/stat.h>
#include <algorithm>
#include <csignal>
#include <utility>

#include <fmt/format.h>

#include "sgpu/env/restart.hpp"

namespace sgpu::launcher {
namespace asio = boost::asio;

namespace {
std::chrono::steady_clock::duration to_steady(env::Seconds s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(s);
}
}  // namespace

JobControl::JobControl(asio::io_context& io, JobControlOptions options, Actions& actions)
    : options_(options),
      actions_(actions),
      signals_(io),
      timeout_timer_(io),
      grace_timer_(io),
      backoff_timer_(io),
      hang_timer_(io),
      signal_before_timer_(io) {}

void JobControl::watch_signals() {
  if (!options_.handle_signals) return;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) signals_.add(sig);
  arm_signals();
}

void JobControl::arm_signals() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec || finished_) return;
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      forward(sig);
    } else if (!started_) {
      actions_.on_signal_before_start(sig);
    } else if (stopping_ && final_) {
      if (options_.repeat_signal_kills) kill();  // a second Ctrl-C (or TERM) does not wait for the grace
    } else {
      auto end = end_of_signal(sig);
      if (stopping_ || in_backoff_)
        end_for_good(end, rank_signal_for(sig));  // no restart after a signal to sgpu
      else
        stop(end, rank_signal_for(sig));
    }
    if (!finished_) arm_signals();  // what it did may have ended the job (a rendezvous aborted, a backoff cut short)
  });
}

env::JobEnd JobControl::end_of_signal(int sig) const {
  env::JobEnd end;
  end.kind = env::JobEnd::Kind::Interrupted;
  end.signal = sig;
  struct stat st {};
  bool user_cancelled = !options_.cancel_marker.empty() && ::stat(options_.cancel_marker.c_str(), &st) == 0;
  if (sig == SIGTERM && !user_cancelled) {
    end.kind = env::JobEnd::Kind::Preempted;
    end.reason = "preempted: sgpu received SIGTERM";
  }
  return end;
}

int JobControl::rank_signal_for(int sig) const { return sig == SIGINT || sig == SIGHUP ? sig : options_.stop_signal; }

void JobControl::start() {
  started_ = true;
  // Each attempt's ranks get the whole hang timeout from their start.
  if (options_.hang_timeout && !stopping_) arm_hang_check(to_steady(*options_.hang_timeout));
  if (timeout_armed_ || stopping_) return;
  // Once for the whole run: the timeout covers every attempt together.
  timeout_armed_ = true;
  auto now = std::chrono::system_clock::now();
  if (options_.timeout)
    deadline_ = now + std::chrono::duration_cast<std::chrono::system_clock::duration>(*options_.timeout);
  if (options_.end_by && (!deadline_ || *options_.end_by < *deadline_)) deadline_ = options_.end_by;
  arm_signal_before();
  if (!options_.timeout) return;
  timeout_timer_.expires_after(to_steady(*options_.timeout));
  timeout_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || final_ || finished_) return;
    env::JobEnd end;
    end.kind = env::JobEnd::Kind::TimedOut;
    if (stopping_ || in_backoff_)
      end_for_good(end, options_.stop_signal);
    else
      stop_after_inspecting(end);  // every timed-out run says where each rank was
  });
}

void JobControl::arm_hang_check(std::chrono::steady_clock::duration after) {
  hang_timer_.expires_after(after);
  hang_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) check_progress();
  });
}

// One timer, set to when the newest progress would be a hang timeout old:
// a job that makes progress costs one check per timeout, not a poll.
void JobControl::check_progress() {
  if (finished_ || final_) return;
  auto limit = *options_.hang_timeout;
  if (stopping_ || in_backoff_ || inspecting_) {
    arm_hang_check(to_steady(limit));  // the next attempt's start re-arms it anyway
    return;
  }
  actions_.progress_age([this, limit](std::optional<env::Seconds> age) {
    if (finished_ || final_ || stopping_ || in_backoff_ || inspecting_) return;
    if (!age || *age < limit) {
      auto left = age ? limit - *age : limit;
      arm_hang_check(std::max(to_steady(left), to_steady(env::Seconds(0.05))));
      return;
    }
    env::JobEnd end;
    end.kind = env::JobEnd::Kind::Hung;
    end.reason = fmt::format("no rank made progress for {} (--hang-timeout)", env::format_duration(limit));
    stop_after_inspecting(end);
  });
}

void JobControl::stop_after_inspecting(env::JobEnd cause) {
  if (inspecting_) return;
  inspecting_ = true;
  actions_.inspect(cause, [this, cause](const std::string& verdict) mutable {
    inspecting_ = false;
    if (finished_ || stopping_ || in_backoff_) return;  // a rank failed, a signal came: that ended it
    if (!verdict.empty()) cause.reason = cause.reason.empty() ? verdict : cause.reason + ": " + verdict;
    stop(cause, options_.stop_signal);
  });
}

// Once per run, on the loop: the ranks of whatever attempt runs then get it.
// A deadline already closer than the warning at start gets none: a rank that
// just started has no handler yet, and USR1/USR2 would kill it.
void JobControl::arm_signal_before() {
  if (!options_.signal_before || !deadline_) return;
  auto when =
      *deadline_ - std::chrono::duration_cast<std::chrono::system_clock::duration>(options_.signal_before->before);
  auto wait = when - std::chrono::system_clock::now();
  if (wait < std::chrono::system_clock::duration::zero()) {
    actions_.on_signal_before(*options_.signal_before, *deadline_, false);
    return;
  }
  signal_before_timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(wait));
  signal_before_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || finished_ || stopping_ || in_backoff_) return;
    forward(options_.signal_before->signal);
    actions_.on_signal_before(*options_.signal_before, *deadline_, true);
  });
}

bool JobControl::will_restart(const env::JobEnd& cause) const {
  return !no_restart_ && attempt_ < options_.max_restarts && env::restartable(cause);
}

void JobControl::stop(const env::JobEnd& cause, int sig) {
  if (stopping_ || finished_ || in_backoff_) return;
  stopping_ = true;
  end_ = cause;
  final_ = !will_restart(cause);
  if (final_) timeout_timer_.cancel();
  actions_.on_stopping(cause);
  actions_.signal_job(sig);
  if (finished_) return;  // on_stopping or signal_job found nothing left to wait for
  grace_timer_.expires_after(to_steady(options_.grace));
  grace_timer_.async_wait([this, attempt = attempt_](boost::system::error_code ec) {
    // Only this attempt's teardown: a SIGKILL after a restart would end the next attempt's ranks.
    if (!ec && !finished_ && stopping_ && attempt == attempt_) actions_.kill_job();
  });
}

bool JobControl::stop_for_good(const env::JobEnd& cause, int sig) {
  if (finished_ || (stopping_ && final_)) return false;
  no_restart_ = true;
  if (stopping_ || in_backoff_)
    end_for_good(cause, sig);
  else
    stop(cause, sig);
  return true;
}

void JobControl::settle_end(const env::JobEnd& end) {
  if (!stopping_ || finished_) return;
  end_ = end;
  if (env::restartable(end)) return;
  no_restart_ = true;
  final_ = true;
  timeout_timer_.cancel();
}

void JobControl::end_for_good(const env::JobEnd& cause, int sig) {
  final_ = true;
  end_ = cause;
  timeout_timer_.cancel();
  actions_.on_stopping(cause);
  if (in_backoff_) {  // nothing runs: the run ends now
    in_backoff_ = false;
    backoff_timer_.cancel();
    stopping_ = true;
    auto then = std::exchange(pending_, nullptr);
    if (then) then(false);
    return;
  }
  actions_.signal_job(sig);  // the teardown under way (its grace runs) now ends the run
}

void JobControl::rank_exited(int rank, const env::ExitStatus& status, const std::string& host) {
  if (status.success() || stopping_) return;
  env::JobEnd end;
  end.kind = env::JobEnd::Kind::RankFailed;
  end.rank = rank;
  end.status = status;
  end.host = host;
  stop(end, options_.stop_signal);
}

void JobControl::kill() { actions_.kill_job(); }

void JobControl::forward(int sig) {
  if (!started_ || in_backoff_ || finished_) return;
  if (options_.signal_before_once && options_.signal_before && sig == options_.signal_before->signal &&
      std::exchange(signal_before_forwarded_, true))
    return;
  actions_.forward_signal(sig);
}

void JobControl::all_exited() {
  grace_timer_.cancel();
  if (!stopping_ || final_) {
    timeout_timer_.cancel();
    signal_before_timer_.cancel();
  }
}

void JobControl::attempt_over(std::function<void(bool again)> then) {
  // Nothing of the attempt is left to kill. The Supervisor said so
  // (all_exited); a ClusterJob never does, since a lost node's ranks never
  // report their ends, so the attempt's end is where the grace ends for both.
  grace_timer_.cancel();
  if (!stopping_ || final_ || finished_) {
    then(false);
    return;
  }
  ++attempt_;
  auto backoff = env::restart_backoff(options_.restart_backoff, attempt_);
  in_backoff_ = true;
  stopping_ = false;
  pending_ = std::move(then);
  actions_.on_restart(attempt_, end_, backoff);
  backoff_timer_.expires_after(to_steady(backoff));
  backoff_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || !in_backoff_) return;
    in_backoff_ = false;
    end_ = {};
    auto again = std::exchange(pending_, nullptr);
    again(true);
  });
}

void JobControl::finish() {
  finished_ = true;
  timeout_timer_.cancel();
  grace_timer_.cancel();
  backoff_timer_.cancel();
  hang_timer_.cancel();
  signal_before_timer_.cancel();
  boost::system::error_code ignored;
  signals_.cancel(ignored);
  signals_.clear(ignored);
}

}  // namespace sgpu::launcher
