#include "sgpu/launcher/process/supervisor.hpp"

#include "sgpu/launcher/process/open_files.hpp"
#include "sgpu/launcher/process/orphan_guard.hpp"

#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <system_error>

#include <fmt/format.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

namespace sgpu::launcher {
namespace asio = boost::asio;

namespace {
constexpr std::size_t kReadChunk = 64 * 1024;
// Ranks started between two turns of the event loop.
constexpr std::size_t kSpawnBatch = 32;
// After the last rank exits, how long a pipe may stay open (held by a process
// that escaped the rank's group) before sgpu stops reading it.
constexpr auto kDrainLimit = std::chrono::seconds(2);

std::chrono::steady_clock::duration to_steady(env::Seconds s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(s);
}
}  // namespace

struct Supervisor::State {
  struct Rank {
    std::unique_ptr<RankProcess> process;
    RankRecord record;
    std::array<bool, 2> open{false, false};
  };

  OrphanGuard guard;  // first: forked before any pipe or handler exists
  asio::io_context& io;
  JobObserver& observer;
  SupervisorOptions options;
  asio::signal_set signals;
  asio::steady_timer timeout_timer;
  asio::steady_timer grace_timer;
  asio::steady_timer drain_timer;
  std::vector<std::unique_ptr<Rank>> ranks;
  JobOutcome outcome;
  bool tearing_down = false;
  bool killed = false;
  bool finished = false;
  std::function<void(const JobOutcome&)> on_finished;
  int running = 0;
  int open_pipes = 0;
  std::vector<RankLaunch> launches;  // while spawning: the ranks to start
  bool spawning = false;
  rlimit open_files{};                 // sgpu's RLIMIT_NOFILE before raising it: what ranks get
  std::weak_ptr<OutputFlow> flow;      // the console's backpressure, if any
  std::array<char, kReadChunk> chunk;  // every pipe is read into this, one at a time

  ~State() {
    if (auto console = flow.lock()) console->forget_waiting();  // they point into this
  }

  State(asio::io_context& io_, JobObserver& obs, SupervisorOptions opts)
      : io(io_),
        observer(obs),
        options(opts),
        signals(io_, SIGINT, SIGTERM, SIGHUP),
        timeout_timer(io_),
        grace_timer(io_),
        drain_timer(io_),
        flow(obs.output_flow()) {
    signals.add(SIGUSR1);
    signals.add(SIGUSR2);
  }

  void signal_all(int sig) {
    for (auto& r : ranks)
      if (!r->record.status) r->process->signal_group(sig);
  }

  void kill_now() {
    killed = true;
    signal_all(SIGKILL);
  }

  void begin_teardown(const env::JobEnd& cause, int sig) {
    if (tearing_down) return;
    tearing_down = true;
    outcome.end = cause;
    observer.on_teardown(cause);
    timeout_timer.cancel();
    signal_all(sig);
    if (running == 0) return;
    grace_timer.expires_after(to_steady(options.grace));
    grace_timer.async_wait([this](boost::system::error_code ec) {
      if (!ec) kill_now();
    });
  }

  void arm_signals() {
    signals.async_wait([this](boost::system::error_code ec, int sig) {
      if (ec) return;
      if (sig == SIGUSR1 || sig == SIGUSR2) {
        signal_all(sig);  // checkpoint-on-preemption signals pass through as they are
      } else if (tearing_down) {
        kill_now();  // a second Ctrl-C (or TERM) does not wait for the grace
      } else {
        env::JobEnd end;
        end.kind = env::JobEnd::Kind::Interrupted;
        end.signal = sig;
        begin_teardown(end, sig);
      }
      arm_signals();
    });
  }

  // Reads the pipe into the one buffer all ranks share (no buffer per rank,
  // so memory does not grow with the ranks); when it is empty, waits until
  // it is readable. A pipe that had data is read again from the loop's
  // queue (post), so a busy rank never starves the others or the timers.
  void read(Rank& r, Stream stream) {
    auto& pipe = stream == Stream::Out ? r.process->out() : r.process->err();
    ssize_t n = 0;
    while ((n = ::read(pipe.native_handle(), chunk.data(), chunk.size())) < 0 && errno == EINTR) {
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pipe.async_wait(asio::posix::stream_descriptor::wait_read, [this, &r, stream](boost::system::error_code ec) {
        if (ec) {
          close_pipe(r, stream);
          return;
        }
        read(r, stream);
      });
      return;
    }
    if (n > 0)
      observer.on_rank_output(r.record.rank, stream, std::string_view(chunk.data(), static_cast<std::size_t>(n)));
    if (n <= 0) {  // end of file, or an error: nothing more comes from this pipe
      close_pipe(r, stream);
      return;
    }
    // The console's reader lags: read on once it caught up (backpressure).
    if (auto console = flow.lock(); console && console->paused()) {
      console->when_open([this, &r, stream] { read(r, stream); });
      return;
    }
    asio::post(io, [this, &r, stream] {
      if (r.open[stream == Stream::Out ? 0 : 1]) read(r, stream);
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
    bool failed = !r.record.status->success();
    if (failed && tearing_down) r.record.terminated_by_sgpu = true;
    observer.on_rank_exited(r.record.rank, *r.record.status, r.record.terminated_by_sgpu);
    if (failed && !tearing_down) {
      env::JobEnd end;
      end.kind = env::JobEnd::Kind::RankFailed;
      end.rank = r.record.rank;
      end.status = *r.record.status;
      begin_teardown(end, SIGTERM);
    }
    if (running == 0) {
      grace_timer.cancel();
      timeout_timer.cancel();
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

  // Starts ranks from `first` on, a batch at a time, going back to the loop
  // in between: Ctrl-C or the timeout during a large start act at once, and
  // the ranks not started yet are not started.
  void spawn_from(std::size_t first) {
    std::size_t i = first;
    for (std::size_t end = std::min(first + kSpawnBatch, launches.size()); i < end && !tearing_down; ++i)
      spawn(launches[i]);
    if (i < launches.size() && !tearing_down) {
      asio::post(io, [this, i] { spawn_from(i); });
      return;
    }
    spawning = false;
    launches = {};
    maybe_finish();
  }

  void spawn(const RankLaunch& launch) {
    auto rank = std::make_unique<Rank>();
    rank->record.rank = launch.rank;
    try {
      rank->process = std::make_unique<RankProcess>(io, launch, &open_files);
    } catch (const std::system_error& e) {
      env::JobEnd end;
      end.kind = env::JobEnd::Kind::SpawnFailed;
      end.rank = launch.rank;
      end.spawn_errno = e.code().value();
      outcome.spawn_error = fmt::format("{}: {}", launch.executable, std::generic_category().message(e.code().value()));
      begin_teardown(end, SIGKILL);
      return;
    }
    rank->record.pid = rank->process->pid();
    guard.watch(rank->record.pid);
    rank->record.started = Clock::now();
    rank->open = {true, true};
    open_pipes += 2;
    ++running;
    observer.on_rank_started(launch.rank, rank->record.pid);
    auto& r = *rank;
    ranks.push_back(std::move(rank));
    read(r, Stream::Out);
    read(r, Stream::Err);
    r.process->async_wait([this, &r](int status) { on_exit(r, status); });
  }

  void maybe_finish() {
    if (running > 0 || open_pipes > 0 || spawning || finished) return;
    finished = true;
    // No read waits on the console any more; the flow may outlive this.
    if (auto console = flow.lock()) console->forget_waiting();
    flow.reset();
    drain_timer.cancel();
    timeout_timer.cancel();
    grace_timer.cancel();
    boost::system::error_code ignored;
    signals.cancel(ignored);
    outcome.ended = Clock::now();
    for (auto& r : ranks) outcome.ranks.push_back(r->record);
    outcome.exit_code = env::job_exit_code(outcome.end);
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
  if (!state_->finished) state_->begin_teardown(cause, sig);
}

void Supervisor::forward(int sig) { state_->signal_all(sig); }

void Supervisor::kill() { state_->kill_now(); }

void Supervisor::start(const std::vector<RankLaunch>& launches, std::function<void(const JobOutcome&)> on_finished) {
  auto& s = *state_;
  s.on_finished = std::move(on_finished);
  s.outcome.started = Clock::now();
  s.open_files = raise_open_files_limit(static_cast<int>(launches.size()));
  if (s.options.handle_signals) s.arm_signals();
  if (s.options.timeout) {
    s.timeout_timer.expires_after(to_steady(*s.options.timeout));
    s.timeout_timer.async_wait([&s](boost::system::error_code ec) {
      if (ec) return;
      env::JobEnd end;
      end.kind = env::JobEnd::Kind::TimedOut;
      s.begin_teardown(end, SIGTERM);
    });
  }
  s.launches = launches;
  s.spawning = true;
  s.spawn_from(0);
}

}  // namespace sgpu::launcher
