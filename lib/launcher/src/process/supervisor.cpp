#include "sgpu/launcher/process/supervisor.hpp"

#include "process/spawn.hpp"

#include "sgpu/launcher/process/adopted_reaper.hpp"
#include "sgpu/launcher/process/job_control.hpp"
#include "sgpu/launcher/process/open_files.hpp"
#include "sgpu/launcher/process/orphan_guard.hpp"
#include "sgpu/launcher/process/read_buffers.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <functional>
#include <optional>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

namespace sgpu::launcher {
namespace asio = boost::asio;

namespace {
// One read takes up to a full stdout pipe (rank_pipe_size): fewer reads, and
// fewer and bigger writes to the console and the logs.
constexpr std::size_t kReadChunk = 256 << 10;
// Read buffers kept for reuse: what the log writer holds before it pauses
// the reads (FileWriterThread::kPauseAt), and one more.
constexpr std::size_t kSpareReadBuffers = (4 << 20) / kReadChunk + 1;
// Ranks started between two turns of the event loop.
constexpr std::size_t kSpawnBatch = 32;
// After the last rank exits, how long a pipe may stay open (held by a process
// that escaped the rank's group) before sgpu stops reading it.
constexpr auto kDrainLimit = std::chrono::seconds(2);
}  // namespace

struct Supervisor::State : JobControl::Actions {
  struct Rank {
    std::unique_ptr<RankProcess> process;
    RankRecord record;
    std::array<bool, 2> open{false, false};
    bool ended_first = false;  // it had exited when the teardown's signal went out: not sgpu's doing
    std::string heartbeat;     // $SGPU_HEARTBEAT_FILE
  };

  OrphanGuard guard;  // started first in start(): forked (its fallback) before any pipe or handler exists
  asio::io_context& io;
  std::optional<AdoptedReaper> reaper;  // from start() to the end of the run
  JobObserver& observer;
  std::function<std::vector<RankLaunch>(int)> relaunch;
  decltype(SupervisorOptions::inspect) inspect_ranks;
  std::function<void()> on_end;
  std::chrono::steady_clock::time_point last_output{};  // this attempt's newest output (or its start)
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
  std::vector<RankLaunch> launches;  // while spawning: the ranks to start
  bool spawning = false;
  rlimit open_files{};  // sgpu's RLIMIT_NOFILE before raising it: what ranks get
  // Backpressure: the console's (its reader lags) and the run log's (its disk lags).
  std::vector<std::weak_ptr<OutputFlow>> flows;
  std::size_t stdout_pipe = 0;  // each rank's stdout pipe size (rank_pipe_size)
  sigset_t caught{};            // the signals a rank resets before exec, for this batch (caught_signals)
  // Every pipe is read into the current one of these, one at a time; the
  // first is allocated on the first read (a job that prints nothing never
  // needs one), another only while an observer keeps the last.
  ReadBuffers buffers{kReadChunk, kSpareReadBuffers};

  ~State() {
    forget_flows();  // their waiting reads point into this
  }

  State(asio::io_context& io_, JobObserver& obs, SupervisorOptions opts)
      : io(io_),
        observer(obs),
        relaunch(std::move(opts.relaunch)),
        inspect_ranks(std::move(opts.inspect)),
        on_end(std::move(opts.on_end)),
        control(io_, control_options(opts, relaunch != nullptr), *this),
        drain_timer(io_),
        flows(weak_flows(obs)) {}

  static JobControlOptions control_options(const SupervisorOptions& opts, bool restarts) {
    auto o = opts.control;
    if (!restarts) o.max_restarts = 0;
    return o;
  }

  static std::vector<std::weak_ptr<OutputFlow>> weak_flows(JobObserver& obs) {
    auto shared = obs.output_flows();
    return {shared.begin(), shared.end()};
  }

  void forget_flows() {
    for (auto& weak : flows)
      if (auto f = weak.lock()) f->forget_waiting();
  }

  // Runs `go` now if every flow is open, else once they all are.
  void when_flowing(std::function<void()> go) {
    for (auto& weak : flows) {
      auto f = weak.lock();
      if (f && f->paused()) {
        f->when_open([this, go = std::move(go)]() mutable { when_flowing(std::move(go)); });
        return;
      }
    }
    go();
  }

  // JobControl::Actions: this node's ranks. A rank's own process gets the
  // stop signal and what is forwarded; its group (what it started too) only
  // SIGCONT and SIGKILL: PyTorch's DataLoader workers die of a SIGTERM or
  // SIGUSR2 of their own, and the rank then fails ("DataLoader worker ...
  // is killed by signal") before its checkpoint is written.
  void signal_ranks(int sig) {
    for (auto& r : ranks)
      if (!r->record.status) r->process->signal_group(sig);
  }
  void signal_rank_processes(int sig) {
    for (auto& r : ranks)
      if (!r->record.status) r->process->signal(sig);
  }
  // A stopped rank (SIGSTOP, a debugger's ^Z) acts on its SIGTERM only once
  // continued: without SIGCONT it would cost the whole grace.
  void signal_job(int sig) override {
    for (auto& r : ranks)
      if (!r->record.status && r->process->exited()) r->ended_first = true;
    if (sig == SIGKILL) return signal_ranks(sig);
    signal_rank_processes(sig);
    signal_ranks(SIGCONT);
  }
  void kill_job() override { signal_ranks(SIGKILL); }
  void forward_signal(int sig) override { signal_rank_processes(sig); }
  void on_signal_before(const env::SignalBefore& signal, Clock::time_point deadline, bool sent) override {
    observer.on_signal_before(signal, deadline, sent);
  }
  void on_stopping(const env::JobEnd& cause) override {
    outcome.end = cause;
    observer.on_teardown(cause);
  }
  void on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) override {
    observer.on_restart(attempt, cause, backoff);
  }
  void progress_age(std::function<void(std::optional<env::Seconds>)> answer) override { answer(age()); }
  void inspect(const env::JobEnd& why, std::function<void(std::string)> done) override {
    if (!inspect_ranks) return done("");
    inspect_ranks(why, running_ranks(), std::move(done));
  }

  std::vector<RunningRank> running_ranks() const {
    std::vector<RunningRank> out;
    for (const auto& r : ranks)
      if (!r->record.status && r->process) out.push_back({r->record.rank, r->record.pid, r->heartbeat});
    return out;
  }

  // The newest progress: output seen here, or the newest heartbeat file's
  // time (a rank in any language touches it; Python's sgpu.heartbeat()).
  env::Seconds age() const {
    auto since_output = std::chrono::duration_cast<env::Seconds>(std::chrono::steady_clock::now() - last_output);
    auto newest = since_output;
    auto now = std::chrono::system_clock::now();
    for (const auto& r : ranks) {
      struct stat st {};
      if (r->heartbeat.empty() || r->record.status || ::stat(r->heartbeat.c_str(), &st) != 0) continue;
      auto touched =
          std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
      if (touched < now - std::chrono::duration_cast<std::chrono::system_clock::duration>(newest)) continue;
      newest = std::chrono::duration_cast<env::Seconds>(now - touched);
      if (newest.count() < 0) newest = env::Seconds(0);
    }
    return newest;
  }

  // Reads the pipe into the buffer all ranks share (no buffer per rank, so
  // memory does not grow with the ranks); when it is empty, waits until it
  // is readable. A pipe that had data is read again from the loop's
  // queue (post), so a busy rank never starves the others or the timers.
  void read(Rank& r, Stream stream) {
    auto& pipe = stream == Stream::Out ? r.process->out() : r.process->err();
    char* chunk = buffers.current();
    ssize_t n = 0;
    // The analyzer takes weak_ptr::lock() in when_flowing for a mutex's.
    // NOLINTNEXTLINE(clang-analyzer-unix.BlockInCriticalSection): a non-blocking pipe, no lock held
    while ((n = ::read(pipe.native_handle(), chunk, buffers.size())) < 0 && errno == EINTR) {
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
    if (n > 0) last_output = std::chrono::steady_clock::now();
    if (n > 0)
      observer.on_rank_output(r.record.rank, stream, std::string_view(chunk, static_cast<std::size_t>(n)),
                              buffers.owner());
    if (n <= 0) {  // end of file, or an error: nothing more comes from this pipe
      close_pipe(r, stream);
      return;
    }
    // The console's reader or the log's disk lags: read on once they caught up (backpressure).
    when_flowing([this, &r, stream] {
      asio::post(io, [this, &r, stream] {
        if (r.open[stream == Stream::Out ? 0 : 1]) read(r, stream);
      });
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
    r.record.terminated_by_sgpu = !r.record.status->success() && was_stopping && !r.ended_first;
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

  // Starts ranks from `first` on, a batch at a time, going back to the loop
  // in between: Ctrl-C or the timeout during a large start act at once, and
  // the ranks not started yet are not started. A batch's ranks exec beside
  // sgpu and each other; once all have, they are the job's in rank order, up
  // to the first that could not start.
  void spawn_from(std::size_t first) {
    caught = caught_signals();  // no handler changes within the batch
    std::size_t end = control.stopping() ? first : std::min(first + kSpawnBatch, launches.size());
    std::vector<std::unique_ptr<Rank>> batch;
    batch.reserve(end - first);
    std::size_t i = first;
    std::optional<std::pair<int, int>> failed;  // the rank that could not start, and why (errno)
    for (; i < end; ++i) {
      try {
        batch.push_back(start_rank(launches[i]));
      } catch (const std::system_error& e) {
        failed = {static_cast<int>(i), e.code().value()};  // no pipe, no process: the ones before it did start
        break;
      }
    }
    // A rank whose exec failed ends the start there: the later ones go
    // (killed and reaped) with the batch, never the job's.
    for (std::size_t k = 0; k < batch.size(); ++k) {
      if (int error = batch[k]->process->start_error(); error != 0) {
        failed = {static_cast<int>(first + k), error};
        break;
      }
      adopt(std::move(batch[k]));
    }
    if (failed) {
      spawn_failed(launches[static_cast<std::size_t>(failed->first)], failed->second);
      i = end;
    }
    if (i < launches.size() && !control.stopping()) {
      asio::post(io, [this, i] { spawn_from(i); });
      return;
    }
    spawning = false;
    launches = {};
    maybe_finish();
  }

  std::unique_ptr<Rank> start_rank(const RankLaunch& launch) {
    auto rank = std::make_unique<Rank>();
    rank->record.rank = launch.rank;
    if (auto hb = launch.env.find("SGPU_HEARTBEAT_FILE"); hb != launch.env.end()) rank->heartbeat = hb->second;
    rank->process =
        std::make_unique<RankProcess>(io, launch, RankProcess::InBackground{}, &open_files, stdout_pipe, &caught);
    return rank;
  }

  void spawn_failed(const RankLaunch& launch, int error) {
    env::JobEnd end;
    end.kind = env::JobEnd::Kind::SpawnFailed;
    end.rank = launch.rank;
    end.spawn_errno = error;
    outcome.spawn_error = fmt::format("{}: {}", launch.executable, std::generic_category().message(error));
    end.reason = outcome.spawn_error;
    control.stop(end, SIGKILL);
  }

  // A started rank becomes the job's: watched, read, waited for.
  void adopt(std::unique_ptr<Rank> rank) {
    rank->record.pid = rank->process->pid();
    guard.watch(rank->record.pid);
    rank->record.started = Clock::now();
    rank->open = {true, true};
    open_pipes += 2;
    ++running;
    observer.on_rank_started(rank->record.rank, rank->record.pid);
    auto& r = *rank;
    ranks.push_back(std::move(rank));
    read(r, Stream::Out);
    read(r, Stream::Err);
    r.process->async_wait([this, &r](int status) { on_exit(r, status); });
  }

  void maybe_finish() {
    if (running > 0 || open_pipes > 0 || spawning || finished) return;
    finished = true;
    // No read waits on a flow any more; they may outlive this.
    forget_flows();
    flows.clear();
    drain_timer.cancel();
    AttemptOutcome attempt{control.attempt(), outcome.end, {}, attempt_started, Clock::now(), outcome.spawn_error};
    for (auto& r : ranks) attempt.ranks.push_back(r->record);
    outcome.attempts.push_back(attempt);
    // Every rank is reaped and its pipes closed: its pidfd goes now, not with
    // the run (a job restarted 13 times held 68 of them). After this turn,
    // since a rank's exit handler (on its pidfd) may be what called us.
    asio::post(io, [this] {
      for (auto* list : {&ranks, &retired})
        for (auto& r : *list) r->process.reset();
    });
    control.attempt_over([this](bool again) {
      if (again)
        restart();
      else
        finish_run();
    });
  }

  void finish_run() {
    control.finish();
    if (reaper) reaper->stop();
    outcome.ended = Clock::now();
    outcome.ranks = outcome.attempts.back().ranks;
    if (auto end = std::exchange(on_end, nullptr)) end();
    if (on_finished) asio::post(io, [this] { on_finished(outcome); });
  }

  // The failed attempt is torn down and the backoff is over: the whole group again.
  void restart() {
    auto next = relaunch(control.attempt());
    if (next.empty()) return finish_run();  // the run's end stays the last attempt's
    finished = false;
    for (auto& r : ranks) retired.push_back(std::move(r));
    ranks.clear();
    outcome.end = {};
    outcome.spawn_error.clear();
    observer.on_attempt_started(control.attempt());
    flows = weak_flows(observer);  // the console's, if it still takes backpressure, and the log's
    start_attempt(std::move(next));
  }

  // One attempt's ranks, a batch per turn of the loop (spawn_from).
  void start_attempt(std::vector<RankLaunch> attempt) {
    attempt_started = Clock::now();
    last_output = std::chrono::steady_clock::now();
    if (auto deadline = control.deadline()) {
      auto unix_time = std::chrono::duration_cast<std::chrono::seconds>(deadline->time_since_epoch()).count();
      for (auto& launch : attempt) launch.env_overrides["SGPU_DEADLINE"] = std::to_string(unix_time);
    }
    launches = std::move(attempt);
    spawning = true;
    spawn_from(0);
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

void Supervisor::forward(int sig) { state_->control.forward(sig); }

void Supervisor::kill() { state_->control.kill(); }

std::vector<RunningRank> Supervisor::running_ranks() const { return state_->running_ranks(); }

env::Seconds Supervisor::progress_age() const { return state_->age(); }

void Supervisor::start(const std::vector<RankLaunch>& launches, std::function<void(const JobOutcome&)> on_finished) {
  auto& s = *state_;
  s.on_finished = std::move(on_finished);
  s.outcome.started = Clock::now();
  s.open_files = raise_open_files_limit(static_cast<int>(launches.size()));
  // Ranks share sgpu's descriptor table until their first call: grown now, not under them.
  reserve_descriptor_table(open_files_needed(static_cast<int>(launches.size())) + 64);
  s.guard.start();  // after the table grew: its child shares the table until its first call
  // Every process of the run inherits these: after a kill -9 of sgpu, the
  // guard finds what escaped the ranks' groups by them. Never GROUP_RANK
  // alone, which other jobs' processes have too.
  if (!launches.empty()) {
    const auto& env = launches.front().env;
    auto run_id = env.find("SGPU_RUN_ID");
    auto node = env.find("GROUP_RANK");
    if (run_id != env.end() && !run_id->second.empty()) {
      s.guard.mark("SGPU_RUN_ID=" + run_id->second);
      if (node != env.end()) s.guard.mark("GROUP_RANK=" + node->second);
    }
  }
  s.stdout_pipe = rank_pipe_size(launches.size());
  s.control.watch_signals();
  s.reaper.emplace(s.io);
  // The timeout and signals act from now on, also while a large job is still starting.
  s.control.start();
  s.start_attempt(launches);
}

}  // namespace sgpu::launcher
