#include "sgpu/launcher/process/job_control.hpp"

#include <csignal>

namespace sgpu::launcher {
namespace asio = boost::asio;

namespace {
std::chrono::steady_clock::duration to_steady(env::Seconds s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(s);
}
}  // namespace

JobControl::JobControl(asio::io_context& io, JobControlOptions options, Actions& actions)
    : options_(options), actions_(actions), signals_(io), timeout_timer_(io), grace_timer_(io) {}

void JobControl::watch_signals() {
  if (!options_.handle_signals) return;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) signals_.add(sig);
  arm_signals();
}

void JobControl::arm_signals() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (ec || finished_) return;
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      if (started_) actions_.forward_signal(sig);
    } else if (!started_) {
      actions_.on_signal_before_start(sig);
    } else if (stopping_) {
      kill();  // a second Ctrl-C (or TERM) does not wait for the grace
    } else {
      env::JobEnd end;
      end.kind = env::JobEnd::Kind::Interrupted;
      end.signal = sig;
      stop(end, sig);
    }
    if (!finished_) arm_signals();  // what it did may have ended the job (a rendezvous aborted)
  });
}

void JobControl::start() {
  started_ = true;
  if (!options_.timeout || stopping_) return;
  timeout_timer_.expires_after(to_steady(*options_.timeout));
  timeout_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec || stopping_ || finished_) return;
    env::JobEnd end;
    end.kind = env::JobEnd::Kind::TimedOut;
    stop(end, SIGTERM);
  });
}

void JobControl::stop(const env::JobEnd& cause, int sig) {
  if (stopping_ || finished_) return;
  stopping_ = true;
  end_ = cause;
  timeout_timer_.cancel();
  actions_.on_stopping(cause);
  actions_.signal_job(sig);
  if (finished_) return;  // on_stopping or signal_job found nothing left to wait for
  grace_timer_.expires_after(to_steady(options_.grace));
  grace_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !finished_) actions_.kill_job();
  });
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
  timeout_timer_.cancel();
  grace_timer_.cancel();
}

void JobControl::finish() {
  finished_ = true;
  timeout_timer_.cancel();
  grace_timer_.cancel();
  boost::system::error_code ignored;
  signals_.cancel(ignored);
  signals_.clear(ignored);
}

}  // namespace sgpu::launcher
