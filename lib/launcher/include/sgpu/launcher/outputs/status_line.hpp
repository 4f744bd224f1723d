#pragma once
// The one-line live status shown below the job's lines on a terminal: ranks
// running and exited, time elapsed and left before the timeout. Redrawn by a
// timer on the supervisor's io_context, once a second, and erased for good
// once every rank has exited.
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/launcher/outputs/console_sink.hpp"
#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

struct StatusSnapshot {
  int world_size = 0;
  int running = 0;
  int exited = 0;
  int failed = 0;  // of the exited: failed on their own (not stopped by sgpu)
  env::Seconds elapsed{0};
  std::optional<env::Seconds> left;        // nullopt: no timeout
  std::string stopping;                    // why the job is being torn down; empty while it runs
  std::optional<double> network_check_ms;  // several nodes: the reachability check's slowest connect
};

// "sgpu: 6 running, 2 exited (1 failed) | 0:01:23 elapsed | 2:58:37 left
// | network checked in 0.4ms" (pure).
std::string format_status(const StatusSnapshot& s);
// "0:01:23": whole seconds as h:mm:ss (pure).
std::string format_clock(env::Seconds d);

class StatusLine : public JobObserver {
 public:
  StatusLine(boost::asio::io_context& io, ConsoleSink& sink, int world_size, std::optional<env::Seconds> timeout);

  void on_rank_started(int rank, int pid) override;
  void on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) override;
  void on_teardown(const env::JobEnd& cause) override;
  // A new attempt counts its ranks afresh; the clock (and the time left) is the whole run's.
  void on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) override;
  // What the reachability check cost before the ranks started (its slowest node).
  void set_network_check(double slowest_ms) { snapshot_.network_check_ms = slowest_ms; }

 private:
  void draw();
  void tick();
  void stop();

  ConsoleSink& sink_;
  boost::asio::steady_timer timer_;
  std::optional<env::Seconds> timeout_;
  std::chrono::steady_clock::time_point started_{};
  StatusSnapshot snapshot_;
  int started_ranks_ = 0;
  bool ticking_ = false;
  bool clock_started_ = false;
  bool shown_ = false;  // a job shorter than a tick never shows a status line
  bool torn_down_ = false;
};

}  // namespace sgpu::launcher
