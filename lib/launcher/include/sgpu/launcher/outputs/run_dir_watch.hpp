#pragma once
// Notices, on the loop, that the run directory was deleted while its ranks
// run: one inotify watch on the runs directory (IN_DELETE of its name), read only while ranks are
// running, so that it never keeps the event loop alive once they ended.
// What to do then is the caller's: JobOutputs warns and makes it again, so
// that the run stays visible to `sgpu status`, `wait` and `cancel` and its
// end is recorded.
#include <array>
#include <functional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

class RunDirDeletedWatch final : public JobObserver {
 public:
  // `gone` runs on the loop each time the directory is deleted; the watch
  // then follows the directory made again at the same path.
  RunDirDeletedWatch(boost::asio::io_context& io, std::string run_dir, std::function<void()> gone);
  RunDirDeletedWatch(const RunDirDeletedWatch&) = delete;
  RunDirDeletedWatch& operator=(const RunDirDeletedWatch&) = delete;

  void on_rank_started(int rank, int pid) override;
  void on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) override;
  void on_teardown(const env::JobEnd& cause) override;
  void on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) override;

 private:
  void add_watch();
  void arm();
  void stop();

  std::string run_dir_;
  std::string name_;  // the run directory's, in the runs directory watched
  std::function<void()> gone_;
  boost::asio::posix::stream_descriptor stream_;
  int watch_ = -1;
  bool reading_ = false;
  int running_ = 0;
  bool torn_down_ = false;
  std::array<char, 4096> buffer_{};
};

}  // namespace sgpu::launcher
