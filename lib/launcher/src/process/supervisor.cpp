#include "sgpu/launcher/process/supervisor.hpp"

#include "sgpu/launcher/process/job_control.hpp"
#include "sgpu/launcher/process/orphan_guard.hpp"

#include <array>
#include <csignal>
#include <system_error>

#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>

namespace sgpu::launcher {
namespace asio = boost::asio;

namespace {
constexpr std::size_t kReadChunk = 64 * 1024;
// After the last rank exits, how long a pipe may stay open (held by a process
// that escaped the rank's group) before sgpu stops reading it.
constexpr auto kDrainLimit = std::chrono::seconds(2);
}  // namespace

struct Supervisor::State : JobControl::Actions {
  struct Rank {
    std::unique_ptr<RankProcess> process;
    RankRecord record;
    std::array<std::array<char, kReadChunk>, 2> buffers{};
    std::array<bool, 2> open{false, false};
  };

  OrphanGuard guard;  // first: forked before any pipe or handler exists
  asio::io_context& io;
  JobObserver& observer;
  std::function<std::vector<RankLaunch>(int)> relaunch;
  JobControl control;
  asio::steady_timer drain_timer;
  std::vector<std::unique_ptr<Rank>> ranks;
  // Earlier attempts' ranks: cancelled reads may still name them until the loop runs their handlers.
  std::vector<std::unique_ptr<Rank>> retired;
  JobOutcome outcome;
  Clock::time_point attempt_started{};
  bool finished = false;  // this attempt: every rank exited and its output is read
  std::function<void(const JobOutcome&)> on_finished;
  int running = 0;
  int open_pipes = 0;

  State(asio::io_context& io_, JobObserver& obs, SupervisorOptions opts)
      : io(io_),
        observer(obs),
        relaunch(std::move(opts.relaunch)),
        control(io_,
                JobControlOptions{opts.timeout, opts.grace, opts.handle_signals, relaunch ? opts.max_restarts : 0,
                                  opts.restart_backoff},
                *this),
        drain_timer(io_) {}

  // JobControl::Actions: this node's ranks, by process group.
  void signal_job(int sig) override {
    for (auto& r : ranks)
      if (!r->record.status) r->process->signal_group(sig);
  }
  void kill_job() override { signal_job(SIGKILL); }
  void forward_signal(int sig) override { signal_job(sig); }
  void on_stopping(const env::JobEnd& cause) override {
    outcome.end = cause;
    observer.on_teardown(cause);
  }
  void on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) override {
    observer.on_restart(attempt, cause, backoff);
  }

  void read(Rank& r, Stream stream) {
    auto idx = static_cast<std::size_t>(stream == Stream::Out ? 0 : 1);
    auto& pipe = stream == Stream::Out ? r.process->out() : r.process->err();
    pipe.async_read_some(asio::buffer(r.buffers[idx]),
                         [this, &r, stream, idx](boost::system::error_code ec, std::size_t n) {
                           if (n > 0)
                             observer.on_rank_output(r.record.rank, stream, std::string_view(r.buffers[idx].data(), n));
                           if (ec) {
                             close_pipe(r, stream);
                             return;
                           }
                           read(r, stream);
                         });
  }

  void close_pipe(Rank& r, Stream stream) {
    auto idx = static_cast<std::size_t>(stream == Stream::Out ? 0 : 1);
    if (!r.open[idx]) return;
    r.open[idx] = false;
    boost::system::error_code ignored;
    (stream == Stream::Out ? r.process->out() : r.process->err()).close(ignored);
    observer.on_rank_output_closed(r.record.rank, stream);
    --open_pipes;
    maybe_finish();
  }

  void on_exit(Rank& r, int wait_status) {
    r.record.ended = Clock::now();
    r.record.status = env::ExitStatus::from_wait_status(wait_status);
    --running;
    // Whatever the rank left in its group dies with it: no orphans.
    r.process->signal_group(SIGKILL);
    guard.forget(r.record.pid);
    bool was_stopping = control.stopping();
    r.record.terminated_by_sgpu = !r.record.status->success() && was_stopping;
    observer.on_rank_exited(r.record.rank, *r.record.status, r.record.terminated_by_sgpu);
    control.rank_exited(r.record.rank, *r.record.status);
    if (running == 0) {
      control.all_exited();
      drain_timer.expires_after(kDrainLimit);
      drain_timer.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        for (auto& rank : ranks) {
          close_pipe(*rank, Stream::Out);
          close_pipe(*rank, Stream::Err);
        }
      });
    }
    maybe_finish();
  }

  void maybe_finish() {
    if (running > 0 || open_pipes > 0 || finished) return;
    finished = true;
    drain_timer.cancel();
    AttemptOutcome attempt{control.attempt(), outcome.end, {}, attempt_started, Clock::now(), outcome.spawn_error};
    for (auto& r : ranks) attempt.ranks.push_back(r->record);
    outcome.attempts.push_back(attempt);
    control.attempt_over([this](bool again) {
      if (again)
        restart();
      else
        finish_run();
    });
  }

  void finish_run() {
    control.finish();
    outcome.ended = Clock::now();
    outcome.ranks = outcome.attempts.back().ranks;
    if (on_finished) asio::post(io, [this] { on_finished(outcome); });
  }

  // The failed attempt is torn down and the backoff is over: the whole group again.
  void restart() {
    finished = false;
    for (auto& r : ranks) retired.push_back(std::move(r));
    ranks.clear();
    outcome.end = {};
    outcome.spawn_error.clear();
    observer.on_attempt_started(control.attempt());
    spawn(relaunch(control.attempt()));
  }

  void spawn(const std::vector<RankLaunch>& launches);
};

void Supervisor::State::spawn(const std::vector<RankLaunch>& launches) {
  auto& s = *this;
  s.attempt_started = Clock::now();
  for (const auto& launch : launches) {
    auto rank = std::make_unique<State::Rank>();
    rank->record.rank = launch.rank;
    try {
      rank->process = std::make_unique<RankProcess>(s.io, launch);
    } catch (const std::system_error& e) {
      env::JobEnd end;
      end.kind = env::JobEnd::Kind::SpawnFailed;
      end.rank = launch.rank;
      end.spawn_errno = e.code().value();
      s.outcome.spawn_error =
          fmt::format("{}: {}", launch.executable, std::generic_category().message(e.code().value()));
      end.reason = s.outcome.spawn_error;
      s.control.stop(end, SIGKILL);
      break;
    }
    rank->record.pid = rank->process->pid();
    s.guard.watch(rank->record.pid);
    rank->record.started = Clock::now();
    rank->open = {true, true};
    s.open_pipes += 2;
    ++s.running;
    s.observer.on_rank_started(launch.rank, rank->record.pid);
    auto& r = *rank;
    s.ranks.push_back(std::move(rank));
    s.read(r, Stream::Out);
    s.read(r, Stream::Err);
    r.process->async_wait([&s, &r](int status) { s.on_exit(r, status); });
  }
  s.control.start();
  s.maybe_finish();
}

Supervisor::Supervisor(asio::io_context& io, JobObserver& observer, SupervisorOptions options)
    : state_(std::make_unique<State>(io, observer, options)) {}

Supervisor::~Supervisor() = default;

JobOutcome Supervisor::run(const std::vector<RankLaunch>& launches) {
  auto& s = *state_;
  start(launches, nullptr);
  s.io.run();
  s.io.restart();
  return s.outcome;
}

void Supervisor::stop(const env::JobEnd& cause, int sig) {
  if (!state_->finished) state_->control.stop(cause, sig);
}

void Supervisor::forward(int sig) { state_->forward_signal(sig); }

void Supervisor::kill() { state_->control.kill(); }

void Supervisor::start(const std::vector<RankLaunch>& launches, std::function<void(const JobOutcome&)> on_finished) {
  auto& s = *state_;
  s.on_finished = std::move(on_finished);
  s.outcome.started = Clock::now();
  s.control.watch_signals();
  s.spawn(launches);
}

}  // namespace sgpu::launcher
