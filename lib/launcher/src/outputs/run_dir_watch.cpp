#include "sgpu/launcher/outputs/run_dir_watch.hpp"

#include <sys/inotify.h>
#include <sys/stat.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string_view>

namespace sgpu::launcher {

RunDirDeletedWatch::RunDirDeletedWatch(boost::asio::io_context& io, std::string run_dir, std::function<void()> gone)
    : run_dir_(std::move(run_dir)),
      name_(std::filesystem::path(run_dir_).filename().string()),
      gone_(std::move(gone)),
      stream_(io),
      timer_(io) {}

void RunDirDeletedWatch::on_rank_started(int, int) {
  ++running_;
  if (!torn_down_) start();
}

// No rank runs: neither the timer nor the read may keep the event loop alive
// (a node's ranks may be all there is, and the others may never be heard
// of). A rank that starts later starts them again.
void RunDirDeletedWatch::on_rank_exited(int, const env::ExitStatus&, bool) {
  if (--running_ <= 0) stop();
}

// From the teardown on, nothing is watched; a deletion that no watch saw
// (a short run's) is found here, before the run's end is written.
void RunDirDeletedWatch::on_teardown(const env::JobEnd&) {
  torn_down_ = true;
  stop();
  check_still_there();
}

void RunDirDeletedWatch::on_restart(int, const env::JobEnd&, env::Seconds) {
  stop();
  running_ = 0;
  torn_down_ = false;
}

void RunDirDeletedWatch::start() {
  if (stream_.is_open()) {
    if (!reading_) arm();
    return;
  }
  if (waiting_) return;
  waiting_ = true;
  timer_.expires_after(kWatchAfter);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    waiting_ = false;
    if (!ec && running_ > 0 && !torn_down_) watch();
  });
}

void RunDirDeletedWatch::watch() {
  int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd < 0) return;  // no watch: the teardown's check still finds a deleted directory
  stream_.assign(fd);
  add_watch();
  check_still_there();  // deleted before the watch was made
  arm();
}

void RunDirDeletedWatch::check_still_there() {
  struct stat st {};
  if (::stat(run_dir_.c_str(), &st) != 0 && errno == ENOENT) gone_();
}

// On the runs directory, not the run directory: the files sgpu keeps open in
// the run directory hold it, so its own IN_DELETE_SELF would come only once
// they are closed; the runs directory's IN_DELETE comes with the rmdir.
void RunDirDeletedWatch::add_watch() {
  watch_ = ::inotify_add_watch(stream_.native_handle(), std::filesystem::path(run_dir_).parent_path().c_str(),
                               IN_DELETE | IN_ONLYDIR);
}

void RunDirDeletedWatch::stop() {
  if (reading_) stream_.cancel();
  if (waiting_) timer_.cancel();
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
