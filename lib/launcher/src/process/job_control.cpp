#include "sgpu/launcher/process/job_control.hpp"

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
      hang_timer_(io) {}

void JobControl::watch_signals() {
  if (!options_.handle_signals) return;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) signals_.add(sig);
  arm_signals();
}

void JobControl::arm_signals() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec || finished_) return;
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      if (started_ && !in_backoff_) actions_.forward_signal(sig);
    } else if (!started_) {
      actions_.on_signal_before_start(sig);
    } else if (stopping_ && final_) {
      kill();  // a second Ctrl-C (or TERM) does not wait for the grace
    } else {
      env::JobEnd end;
      end.kind = env::JobEnd::Kind::Interrupted;
      end.signal = sig;
      if (stopping_ || in_backoff_)
        end_for_good(end, sig);  // no restart after a signal to sgpu
      else
        stop(end, sig);
    }
    if (!finished_) arm_signals();  // what it did may have ended the job (a rendezvous aborted, a backoff cut short)
  });
}

void JobControl::start() {
  started_ = true;
  // Each attempt's ranks get the whole hang timeout from their start.
  if (options_.hang_timeout && !stopping_) arm_hang_check(to_steady(*options_.hang_timeout));
  // Once for the whole run: the timeout covers every attempt together.
  if (!options_.timeout || stopping_ || timeout_armed_) return;
  timeout_armed_ = true;
  timeout_timer_.expires_after(to_steady(*options_.timeout));
  timeout_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || final_ || finished_) return;
    env::JobEnd end;
    end.kind = env::JobEnd::Kind::TimedOut;
    if (stopping_ || in_backoff_)
      end_for_good(end, SIGTERM);
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
    stop(cause, SIGTERM);
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
  grace_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !finished_) actions_.kill_job();
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
  stop(end, SIGTERM);
}

void JobControl::kill() { actions_.kill_job(); }

void JobControl::all_exited() {
  grace_timer_.cancel();
  if (!stopping_ || final_) timeout_timer_.cancel();
}

void JobControl::attempt_over(std::function<void(bool again)> then) {
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
  boost::system::error_code ignored;
  signals_.cancel(ignored);
  signals_.clear(ignored);
}

}  // namespace sgpu::launcher
