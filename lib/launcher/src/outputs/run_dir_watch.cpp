#include "sgpu/launcher/outputs/run_dir_watch.hpp"

#include <sys/inotify.h>
#include <cstring>
#include <filesystem>
#include <string_view>

namespace sgpu::launcher {

RunDirDeletedWatch::RunDirDeletedWatch(boost::asio::io_context& io, std::string run_dir, std::function<void()> gone)
    : run_dir_(std::move(run_dir)),
      name_(std::filesystem::path(run_dir_).filename().string()),
      gone_(std::move(gone)),
      stream_(io) {
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return;  // no watch: a deleted run directory then shows in the report's warnings alone
  stream_.assign(fd);
  add_watch();
}

// On the runs directory, not the run directory: the files sgpu keeps open in
// the run directory hold it, so its own IN_DELETE_SELF would come only once
// they are closed; the runs directory's IN_DELETE comes with the rmdir.
void RunDirDeletedWatch::add_watch() {
  watch_ = ::inotify_add_watch(stream_.native_handle(), std::filesystem::path(run_dir_).parent_path().c_str(),
                               IN_DELETE | IN_ONLYDIR);
}

void RunDirDeletedWatch::on_rank_started(int, int) {
  ++running_;
  if (!reading_ && !torn_down_ && stream_.is_open()) arm();
}

// No rank runs: the read must not keep the event loop alive (a node's ranks
// may be all there is, and the others may never be heard of). A rank that
// starts later reads again.
void RunDirDeletedWatch::on_rank_exited(int, const env::ExitStatus&, bool) {
  if (--running_ <= 0) stop();
}

// From the teardown on, nothing is watched.
void RunDirDeletedWatch::on_teardown(const env::JobEnd&) {
  torn_down_ = true;
  stop();
}

void RunDirDeletedWatch::on_restart(int, const env::JobEnd&, env::Seconds) {
  stop();
  running_ = 0;
  torn_down_ = false;
}

void RunDirDeletedWatch::stop() {
  if (reading_) stream_.cancel();
}

void RunDirDeletedWatch::arm() {
  reading_ = true;
  stream_.async_read_some(boost::asio::buffer(buffer_), [this](const boost::system::error_code& ec, std::size_t n) {
    reading_ = false;
    if (ec) {
      // Stopped while a rank started again: that rank's read is this one's.
      if (ec == boost::asio::error::operation_aborted && running_ > 0 && !torn_down_) arm();
      return;
    }
    bool gone = false;
    for (std::size_t at = 0; at + sizeof(inotify_event) <= n;) {
      inotify_event event{};
      std::memcpy(&event, buffer_.data() + at, sizeof event);
      if (event.wd == watch_ && (event.mask & IN_DELETE) != 0 && (event.mask & IN_ISDIR) != 0 && event.len > 0 &&
          at + sizeof(inotify_event) + event.len <= n)
        gone = gone || name_ == std::string_view(buffer_.data() + at + sizeof(inotify_event)).substr(0, event.len);
      at += sizeof(inotify_event) + event.len;
    }
    if (gone) {
      gone_();
      add_watch();
    }
    if (running_ > 0 && !torn_down_) arm();
  });
}

}  // namespace sgpu::launcher
