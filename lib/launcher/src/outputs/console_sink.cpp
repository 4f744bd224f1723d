#include "sgpu/launcher/outputs/console_sink.hpp"

#include <sys/ioctl.h>
#include <unistd.h>
#include <cerrno>

namespace sgpu::launcher {

namespace {
// Carriage return, then erase to the end of the line: where the status line was.
constexpr std::string_view kErase = "\r\x1b[K";
constexpr std::size_t kDefaultWidth = 80;

std::size_t terminal_width(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0) return kDefaultWidth;
  return ws.ws_col;
}
}  // namespace

ConsoleSink::ConsoleSink(int out_fd, int err_fd, int status_fd)
    : fds_{out_fd, err_fd}, terminal_{::isatty(out_fd) == 1, ::isatty(err_fd) == 1}, status_fd_(status_fd) {}

bool ConsoleSink::write_fd(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;  // e.g. `sgpu launch ... | head`: keep running, stop printing
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void ConsoleSink::write(Stream stream, std::string_view bytes) {
  auto idx = static_cast<std::size_t>(stream == Stream::Out ? 0 : 1);
  if (broken_[idx] || bytes.empty()) return;
  int fd = fds_[idx];
  if (status_.empty() || !terminal_[idx]) {
    broken_[idx] = !write_fd(fd, bytes);
    return;
  }
  if (fd == status_fd_) {
    // One write: erase the status, the job's lines, the status again.
    combined_.assign(kErase);
    combined_.append(bytes);
    combined_.append(status_);
    broken_[idx] = !write_fd(fd, combined_);
    return;
  }
  status_broken_ = status_broken_ || !write_fd(status_fd_, kErase);
  broken_[idx] = !write_fd(fd, bytes);
  if (!status_broken_) status_broken_ = !write_fd(status_fd_, status_);
}

void ConsoleSink::set_status(std::string_view text) {
  if (status_fd_ < 0 || status_broken_) return;
  // One column short of the width: a line that fills the last column wraps on
  // some terminals, and the erase would then miss its first half.
  auto width = terminal_width(status_fd_);
  if (text.size() >= width) text = text.substr(0, width - 1);
  std::string drawn(kErase);
  drawn.append(text);
  if (drawn == status_) return;
  status_ = std::move(drawn);
  status_broken_ = !write_fd(status_fd_, status_);
}

void ConsoleSink::clear_status() {
  if (status_.empty()) return;
  status_.clear();
  if (!status_broken_) status_broken_ = !write_fd(status_fd_, kErase);
}

}  // namespace sgpu::launcher
