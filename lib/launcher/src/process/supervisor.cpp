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
  JobControl control;
  asio::steady_timer drain_timer;
  std::vector<std::unique_ptr<Rank>> ranks;
  JobOutcome outcome;
  bool finished = false;
  std::function<void(const JobOutcome&)> on_finished;
  int running = 0;
  int open_pipes = 0;

  State(asio::io_context& io_, JobObserver& obs, SupervisorOptions opts)
      : io(io_),
        observer(obs),
        control(io_, JobControlOptions{opts.timeout, opts.grace, opts.handle_signals}, *this),
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
    control.finish();
    outcome.ended = Clock::now();
    for (auto& r : ranks) outcome.ranks.push_back(r->record);
    if (on_finished) asio::post(io, [this] { on_finished(outcome); });
  }
};

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

}  // namespace sgpu::launcher
