#pragma once
// The one job-ending policy, for a one-node Supervisor and a multi-node
// ClusterJob alike. The first cause to end the job wins and is recorded (a
// rank failed, the timeout, a signal to sgpu, a lost node); the job is then
// torn down: the cause's signal to everything, SIGKILL after the grace, and
// at once on a second SIGINT/SIGTERM/SIGHUP. SIGUSR1/SIGUSR2 pass through as
// they are. What "everything" is belongs to the caller (process groups on
// this node, or every node through the rendezvous): it implements Actions.
//
// With restarts (max_restarts > 0) it also decides, once an attempt's
// teardown is over, whether the group starts again: only for a restartable
// end (env::restartable) with restarts left, after a backoff on the loop.
// The timeout covers every attempt together; the timeout or a signal during
// a restartable teardown or the backoff ends the run for good.
//
// Stopping well: a stopped rank gets `stop_signal` (SIGTERM by default; a
// SIGINT or SIGHUP to sgpu is passed as it is), and with `signal_before`
// every rank gets its signal once, that long before the run's deadline (the
// timeout's, or the scheduler's `end_by` if sooner). A SIGTERM to sgpu that
// is not a user's `sgpu cancel` (no `cancel_marker` file) is a preemption.
#include <chrono>
#include <functional>
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/env/stop_signal.hpp"

namespace sgpu::launcher {

struct JobControlOptions {
  std::optional<env::Seconds> timeout;  // nullopt: no limit (an agent: its launcher has it)
  env::Seconds grace{30};
  // Off when something else on the loop owns SIGINT/SIGTERM/SIGHUP (a node
  // agent inside the launcher's process obeys the launcher instead).
  bool handle_signals = true;
  int max_restarts = 0;
  env::Seconds restart_backoff{1};  // before the first restart; doubled each time (env::restart_backoff)
  // --hang-timeout: no progress from any rank for this long ends the
  // attempt as Hung (after the stacks); nullopt: never.
  std::optional<env::Seconds> hang_timeout{};
  int stop_signal = 15;  // SIGTERM
  std::optional<env::SignalBefore> signal_before{};
  // The scheduler's end of the allocation (SLURM's EndTime), when known.
  std::optional<std::chrono::system_clock::time_point> end_by{};
  // A file `sgpu cancel` creates before its SIGTERM; "" for none.
  std::string cancel_marker{};
  // A SLURM agent: SLURM's --signal and the launcher's Forward both bring
  // signal_before's signal; the ranks get it once.
  bool signal_before_once = false;
  // A second SIGINT/SIGTERM/SIGHUP kills at once (a user's second Ctrl-C).
  // Off for an agent: SLURM signals a step's tasks more than once (its step
  // daemon, then srun passing on its own), which cut the grace a rank's
  // checkpoint needed; its launcher's Kill and SLURM's KillWait still follow.
  bool repeat_signal_kills = true;
};

class JobControl {
 public:
  class Actions {
   public:
    virtual ~Actions() = default;
    // Teardown: `sig` to every rank (or node) still running.
    virtual void signal_job(int sig) = 0;
    // SIGKILL to everything still running, now.
    virtual void kill_job() = 0;
    // SIGUSR1/SIGUSR2 as they are (a checkpoint before preemption).
    virtual void forward_signal(int sig) = 0;
    // The job is ending for `cause` (observers hear of it here).
    virtual void on_stopping(const env::JobEnd& cause) = 0;
    // A SIGINT/SIGTERM/SIGHUP before start(): the caller ends its own way
    // (a rendezvous still waiting for nodes aborts). Default: ignored.
    virtual void on_signal_before_start(int /*sig*/) {}
    // Attempt `attempt` will start after `backoff` (observers hear of it here).
    virtual void on_restart(int /*attempt*/, const env::JobEnd& /*cause*/, env::Seconds /*backoff*/) {}
    // --hang-timeout: how long ago the newest progress of any rank (an
    // output line, a heartbeat) was, answered on the loop; nullopt: not known
    // now (nothing is decided this time).
    virtual void progress_age(std::function<void(std::optional<env::Seconds>)> answer) { answer(std::nullopt); }
    // Before a hang or the timeout tears the job down: every rank's stack is
    // taken and shown, then `done(verdict)` ("" when there is none), within
    // a bounded time. Default: nothing to take.
    virtual void inspect(const env::JobEnd& /*why*/, std::function<void(std::string verdict)> done) { done(""); }
    // --signal-before's signal went to every rank (forward_signal), or, with
    // `sent` false, will not: the deadline was already closer at the start.
    virtual void on_signal_before(const env::SignalBefore& /*signal*/,
                                  std::chrono::system_clock::time_point /*deadline*/, bool /*sent*/) {}
  };

  JobControl(boost::asio::io_context& io, JobControlOptions options, Actions& actions);
  JobControl(const JobControl&) = delete;
  JobControl& operator=(const JobControl&) = delete;

  // Signals are handled from now on (with handle_signals).
  void watch_signals();
  // The job runs: the timeout starts.
  void start();
  // Ends the job for `cause` with `sig` first; only the first cause counts.
  void stop(const env::JobEnd& cause, int sig);
  // A cause that rules out another attempt (a node lost, so the group cannot
  // start again whole): during a teardown that would restart, or its backoff,
  // the run now ends for good with it; otherwise as stop(). Returns false when
  // the run was already ending for good (its first cause stays).
  bool stop_for_good(const env::JobEnd& cause, int sig);
  // The attempt's end as its backend explained it, once every rank is down
  // and before attempt_over(): an end that cannot restart (SLURM stopped the
  // job) makes this attempt the last.
  void settle_end(const env::JobEnd& end);
  // A rank ended: a failure ends the job (fail-fast), unless it is ending already.
  void rank_exited(int rank, const env::ExitStatus& status, const std::string& host = {});
  // SIGKILL to everything now (a second signal, or an order from a launcher).
  void kill();
  // `sig` to every rank as it is (SIGUSR1/SIGUSR2, a launcher's Forward).
  // With signal_before_once, signal_before's signal goes at most once per
  // run, whoever sends it: SLURM's --signal reaches the agents when the
  // launcher's timer does.
  void forward(int sig);
  // Nothing is left running: no grace or timeout is needed any more.
  void all_exited();
  // The attempt's teardown is over (nothing runs). `then(true)`: start the
  // group again (attempt() is the new one), after the backoff; `then(false)`:
  // the run is over, end() says why. Called on the loop, never from inside.
  void attempt_over(std::function<void(bool again)> then);
  // The job is over: timers and signal handlers are released.
  void finish();

  bool stopping() const { return stopping_; }
  // The attempt is being torn down or waited out, and another will follow.
  bool restart_pending() const { return (stopping_ && !final_) || in_backoff_; }
  bool started() const { return started_; }
  const env::JobEnd& end() const { return end_; }
  // The run's end once start() ran: the timeout's or the scheduler's, the sooner.
  std::optional<std::chrono::system_clock::time_point> deadline() const { return deadline_; }
  int stop_signal() const { return options_.stop_signal; }
  int attempt() const { return attempt_; }
  // Whether an end like `cause`, now, would be followed by another attempt
  // (restarts left, nothing ending the run for good): --spares asks before
  // it starts a spare.
  bool would_restart(const env::JobEnd& cause) const {
    return !finished_ && !(stopping_ && final_) && will_restart(cause);
  }

 private:
  void arm_signals();
  void arm_hang_check(std::chrono::steady_clock::duration after);
  void check_progress();
  // Ends the job for `cause` once the stacks are taken (a hang, the timeout),
  // unless something else ended it meanwhile.
  void stop_after_inspecting(env::JobEnd cause);
  // A cause that arrives while a restartable end is being torn down or
  // waited out: the run ends for good with it.
  void end_for_good(const env::JobEnd& cause, int sig);
  bool will_restart(const env::JobEnd& cause) const;
  void arm_signal_before();
  // SIGINT, SIGTERM or SIGHUP to sgpu as an end: a SIGTERM from the system is a preemption.
  env::JobEnd end_of_signal(int sig) const;
  // What the ranks get for a signal to sgpu: SIGINT and SIGHUP as they are, else the stop signal.
  int rank_signal_for(int sig) const;

  JobControlOptions options_;
  Actions& actions_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer timeout_timer_;
  boost::asio::steady_timer grace_timer_;
  boost::asio::steady_timer backoff_timer_;
  boost::asio::steady_timer hang_timer_;
  boost::asio::steady_timer signal_before_timer_;
  std::optional<std::chrono::system_clock::time_point> deadline_;
  env::JobEnd end_;
  std::function<void(bool)> pending_;  // attempt_over's continuation, during the backoff
  int attempt_ = 0;
  bool started_ = false;
  bool timeout_armed_ = false;
  bool stopping_ = false;
  bool final_ = false;  // stopping_, and no restart will follow
  bool in_backoff_ = false;
  bool no_restart_ = false;  // stop_for_good: no attempt follows, whatever the cause
  bool finished_ = false;
  bool inspecting_ = false;  // the stacks are being taken before a hang's or the timeout's teardown
  bool signal_before_forwarded_ = false;
};

}  // namespace sgpu::launcher
