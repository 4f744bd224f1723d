#pragma once
// Signals and the run's deadline while a step before the ranks start waits
// (MLflow's run being created) until the ranks' JobControl takes them over: a step that waits ends at once on SIGINT,
// SIGTERM or SIGHUP (exit 128+N) or at --timeout (124), with nothing started. Without it such a signal killed sgpu by
// its default action (no summary, the run left "running"), or was dropped where it was inherited as ignored, and
// --timeout waited for the step.
#include <optional>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/env/duration.hpp"

namespace sgpu::launcher {

class StartWatch {
 public:
  // Acts from now on; `left`: what is left of the run's --timeout, `timeout`
  // the whole of it (for the message).
  StartWatch(boost::asio::io_context& io, std::optional<env::Seconds> left, std::optional<env::Seconds> timeout);
  StartWatch(const StartWatch&) = delete;
  StartWatch& operator=(const StartWatch&) = delete;

  // A signal came or the deadline passed: the step waiting should give up.
  bool fired() const { return signal_ || timed_out_; }
  // The error of what fired ("interrupted by SIGTERM while waiting for
  // MLflow's run", 143); nothing when nothing did.
  void throw_if_fired(const char* waiting_for) const;
  // Stops acting: the ranks' JobControl handles signals and the timeout now.
  // The signals stay registered, so none falls back to its default action
  // in between.
  void stop();

 private:
  boost::asio::signal_set signals_;
  boost::asio::steady_timer deadline_;
  std::optional<env::Seconds> timeout_;
  int signal_ = 0;
  bool timed_out_ = false;
};

}  // namespace sgpu::launcher
