#pragma once
// Reaps the orphans sgpu adopts (orphan_reaper.hpp) as they exit, on the
// event loop: SIGCHLD wakes it, reap_exited_orphans() takes every exited
// orphan and leaves the ranks' statuses to their pidfd waits. Without it, a
// rank that leaves 1,500 short-lived daemons makes 1,500 zombies for the
// whole run, and each restart adds the killed grandchildren, until the node's
// or the pod's PID limit stops every fork.
#include <cstddef>
#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>

namespace sgpu::launcher {

class AdoptedReaper {
 public:
  explicit AdoptedReaper(boost::asio::io_context& io);
  ~AdoptedReaper();
  AdoptedReaper(const AdoptedReaper&) = delete;
  AdoptedReaper& operator=(const AdoptedReaper&) = delete;

  std::size_t reaped() const { return reaped_; }
  // Stops waiting for SIGCHLD, so the loop can run out of work; what is left
  // is for the sweep at the end (kill_adopted_orphans).
  void stop();

 private:
  void wait();
  boost::asio::signal_set sigchld_;
  std::size_t reaped_ = 0;
  // Expires with stop() or the reaper: a completion already queued then does nothing.
  std::shared_ptr<int> token_ = std::make_shared<int>(0);
};

}  // namespace sgpu::launcher
