#include "sgpu/launcher/outputs/console_sink.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

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

ConsoleSink::ConsoleSink(boost::asio::io_context& io, int out_fd, int err_fd, int status_fd)
    : files_(io), terminal_{::isatty(out_fd) == 1, ::isatty(err_fd) == 1}, status_fd_(status_fd) {
  auto drained = [this] { on_drained(); };
  writers_[0] = std::make_unique<ConsoleWriter>(io, out_fd, kResumeAt, kLimit, drained, files_);
  if (err_fd == out_fd) {
    index_err_ = 0;  // -o json: both streams on stderr, in the order they came
  } else {
    writers_[1] = std::make_unique<ConsoleWriter>(io, err_fd, kResumeAt, kLimit, drained, files_);
  }
  status_writer_ = status_fd == out_fd ? 0 : index_err_;
}

void ConsoleSink::check_pause() {
  for (const auto& w : writers_)
    if (w && w->pending() >= kPauseAt) flow_->pause();
}

void ConsoleSink::on_drained() {
  for (const auto& w : writers_)
    if (w && w->pending() >= kResumeAt) return;
  if (flow_->paused()) flow_->resume();
}

void ConsoleSink::write(Stream stream, std::string_view bytes) {
  auto idx = static_cast<std::size_t>(stream == Stream::Out ? 0 : 1);
  auto& w = stream_writer(stream);
  if (w.broken() || bytes.empty()) return;
  if (status_.empty() || !terminal_[idx]) {
    w.write(bytes);
  } else if (&w == writers_[status_writer_].get()) {
    // One write: erase the status, the job's lines, the status again.
    combined_.assign(kErase);
    combined_.append(bytes);
    combined_.append(status_);
    w.write(combined_);
  } else {
    auto& status = *writers_[status_writer_];
    status.write(kErase);
    w.write(bytes);
    status.write(status_);
  }
  check_pause();
}

void ConsoleSink::render(Stream stream, std::string_view bytes, const BytesOwner& owner,
                         FileWriterThread::Render render) {
  stream_writer(stream).render(bytes, owner, std::move(render));
}

void ConsoleSink::set_status(std::string_view text) {
  if (status_fd_ < 0) return;
  auto& w = *writers_[status_writer_];
  // A status line is only worth drawing for a reader that keeps up.
  if (w.broken() || w.pending() > 0) return;
  // One column short of the width: a line that fills the last column wraps on
  // some terminals, and the erase would then miss its first half.
  auto width = terminal_width(status_fd_);
  if (text.size() >= width) text = text.substr(0, width - 1);
  std::string drawn(kErase);
  drawn.append(text);
  if (drawn == status_) return;
  status_ = std::move(drawn);
  w.write(status_);
}

void ConsoleSink::clear_status() {
  if (status_.empty()) return;
  status_.clear();
  writers_[status_writer_]->write(kErase);
}

std::vector<std::shared_ptr<OutputFlow>> ConsoleSink::flows() const { return {flow_, files_.flow()}; }

void ConsoleSink::release() {
  for (auto& w : writers_)
    if (w) w->stop_waiting();
  flow_->release();
  files_.flow()->release();
}

std::size_t ConsoleSink::finish(bool wait) {
  release();
  std::size_t dropped = 0;
  for (auto& w : writers_)
    if (w) dropped += w->finish(wait);
  return dropped;
}

}  // namespace sgpu::launcher
