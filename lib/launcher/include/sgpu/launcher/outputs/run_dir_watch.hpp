#pragma once
// Notices, on the loop, that the run directory was deleted while its ranks
// run: one inotify watch on the runs directory (IN_DELETE of its name), read only while ranks are
// running, so that it never keeps the event loop alive once they ended.
// The watch is made only once ranks have run for kWatchAfter: closing an
// inotify instance waits for an SRCU grace period (6-16 ms here, measured),
// which a short run would pay on its exit path, three times the cost of
// starting 8 ranks. Before that, and at the teardown, one stat says whether
// the directory is still there.
// What to do then is the caller's: JobOutputs warns and makes it again, so
// that the run stays visible to `sgpu status`, `wait` and `cancel` and its
// end is recorded.
#include <array>
#include <chrono>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

class RunDirDeletedWatch final : public JobObserver {
 public:
  static constexpr std::chrono::seconds kWatchAfter{1};

  // `gone` runs on the loop each time the directory is deleted; the watch
  // then follows the directory made again at the same path.
  RunDirDeletedWatch(boost::asio::io_context& io, std::string run_dir, std::function<void()> gone);
  RunDirDeletedWatch(const RunDirDeletedWatch&) = delete;
  RunDirDeletedWatch& operator=(const RunDirDeletedWatch&) = delete;

  void on_rank_started(int rank, int pid) override;
  void on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) override;
  void on_teardown(const env::JobEnd& cause) override;
  void on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) override;
  // Calls `gone` when the directory is missing now: at the run's end (a
  // completed run has no teardown), before its end is written.
  void check_still_there();

 private:
  void start();
  void watch();
  void add_watch();
  void arm();
  void stop();

  std::string run_dir_;
  std::string name_;  // the run directory's, in the runs directory watched
  std::function<void()> gone_;
  boost::asio::posix::stream_descriptor stream_;
  boost::asio::steady_timer timer_;
  int watch_ = -1;
  bool waiting_ = false;  // for kWatchAfter, before the watch is made
  bool reading_ = false;
  int running_ = 0;
  bool torn_down_ = false;
  std::array<char, 4096> buffer_{};
};

}  // namespace sgpu::launcher
