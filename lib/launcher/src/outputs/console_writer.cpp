#include "sgpu/launcher/outputs/console_writer.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>

#include <fmt/format.h>

#include "sgpu/launcher/outputs/file_writer_thread.hpp"

namespace sgpu::launcher {
namespace asio = boost::asio;

ConsoleWriter::ConsoleWriter(asio::io_context& io, int fd, std::size_t low_water, std::size_t limit,
                             std::function<void()> on_drained, FileWriterThread& files)
    : fd_(fd), low_water_(low_water), limit_(limit), on_drained_(std::move(on_drained)) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return;
  if (S_ISREG(st.st_mode)) {
    // A description of the shell's own (its offset, O_APPEND or not), on a
    // descriptor that the ranks do not inherit.
    int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (dup >= 0) {
      mode_ = Mode::Threaded;
      files_ = &files;
      file_ = AppendFile::adopt(dup, fmt::format("fd {}", fd));
    }
    return;
  }
  int own = -1;
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    own = ::open(fmt::format("/proc/self/fd/{}", fd).c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (own >= 0) mode_ = Mode::NonBlocking;
  } else if (S_ISSOCK(st.st_mode)) {
    own = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);  // only to wait on: the description stays blocking
    if (own >= 0) mode_ = Mode::Socket;
  }
  if (own < 0) return;
  own_fd_ = own;
  ready_ = std::make_unique<asio::posix::stream_descriptor>(io);
  boost::system::error_code ec;
  ready_->assign(own, ec);
  if (ec) {  // e.g. /dev/null, which epoll refuses: its writes never wait anyway
    ::close(own);
    own_fd_ = -1;
    ready_.reset();
    mode_ = Mode::Blocking;
    return;
  }
  if (mode_ == Mode::NonBlocking) fd_ = own;
}

ConsoleWriter::~ConsoleWriter() {
  stop_waiting();
  if (own_fd_ >= 0) ::close(own_fd_);
}

long ConsoleWriter::write_some(std::string_view bytes) {
  for (;;) {
    ssize_t n = mode_ == Mode::Socket ? ::send(fd_, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL)
                                      : ::write(fd_, bytes.data(), bytes.size());
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    return -1;  // EPIPE (`sgpu launch ... | head`) and the like
  }
}

void ConsoleWriter::write(std::string_view bytes) {
  if (broken_ || bytes.empty()) return;
  if (mode_ == Mode::Threaded) {
    files_->append(file_, bytes);  // its own flow holds the ranks back while the disk lags
    return;
  }
  if (!armed_ && pending() > 0) flush();  // nothing waits for writable: try again now
  if (pending() == 0) {
    while (!bytes.empty()) {
      long n = write_some(bytes);
      if (n < 0) {
        broken_ = true;
        return;
      }
      if (n == 0) break;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    if (bytes.empty()) return;
    buffer_.clear();
    head_ = 0;
  }
  std::size_t room = limit_ > pending() ? limit_ - pending() : 0;
  if (bytes.size() > room) {
    dropped_ += bytes.size() - room;
    bytes = bytes.substr(0, room);
  }
  buffer_.append(bytes);
  arm();
}

void ConsoleWriter::render(std::string_view bytes, const BytesOwner& owner, FileWriterThread::Render render) {
  files_->append(file_, bytes, owner, std::move(render));  // its own flow holds the ranks back while the disk lags
}

void ConsoleWriter::flush() {
  while (pending() > 0) {
    long n = write_some(std::string_view(buffer_).substr(head_));
    if (n < 0) {
      broken_ = true;
      buffer_ = {};
      head_ = 0;
      break;
    }
    if (n == 0) break;
    head_ += static_cast<std::size_t>(n);
  }
  if (pending() == 0) {
    buffer_ = {};  // give the memory back: a lagging reader is the exception
    head_ = 0;
  } else if (head_ > buffer_.size() / 2) {
    buffer_.erase(0, head_);
    head_ = 0;
  }
}

void ConsoleWriter::stop_waiting() {
  waiting_ = false;
  if (!ready_) return;
  // Off the loop for good (a pending wait ends aborted): the loop may be gone
  // before this writer, and the fd stays ours to write to and close.
  ready_->release();
  ready_.reset();
}

void ConsoleWriter::arm() {
  if (armed_ || !ready_ || !waiting_ || pending() == 0) return;
  armed_ = true;
  ready_->async_wait(asio::posix::stream_descriptor::wait_write,
                     [this, alive = std::weak_ptr<char>(alive_)](boost::system::error_code ec) {
                       if (alive.expired()) return;
                       armed_ = false;
                       if (ec) return;
                       flush();
                       arm();
                       if (pending() < low_water_ && on_drained_) on_drained_();
                     });
}

std::size_t ConsoleWriter::finish(bool wait) {
  if (mode_ == Mode::Threaded) {
    files_->drain();  // a file takes everything: nothing is dropped
    return dropped_;
  }
  flush();
  while (wait && pending() > 0 && !broken_) {
    pollfd p{fd_, POLLOUT, 0};
    if (mode_ == Mode::Socket) p.fd = own_fd_;
    if (::poll(&p, 1, -1) < 0 && errno != EINTR) break;
    flush();
  }
  dropped_ += pending();
  buffer_ = {};
  head_ = 0;
  return dropped_;
}

}  // namespace sgpu::launcher
