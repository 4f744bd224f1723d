#pragma once
// Where the console goes: the file descriptors that get the job's stdout and
// stderr lines, and the live status line kept below them on a terminal. The
// status line is erased before any job bytes are written and drawn again
// after, so it never lands inside a job's line.
#include <array>
#include <string>
#include <string_view>

#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

class ConsoleSink {
 public:
  // `status_fd` is a terminal to draw the status line on, or -1 for none.
  ConsoleSink(int out_fd, int err_fd, int status_fd = -1);

  // Writes `bytes` (whole lines) in full to the stream's descriptor.
  void write(Stream stream, std::string_view bytes);

  bool has_status() const { return status_fd_ >= 0; }
  // Draws `text` as the status line (cut to the terminal's width).
  void set_status(std::string_view text);
  // Erases the status line for good, e.g. before the final report.
  void clear_status();

 private:
  // False once the reader went away (EPIPE): the job goes on, unprinted.
  bool write_fd(int fd, std::string_view bytes);

  std::array<int, 2> fds_;
  std::array<bool, 2> terminal_{false, false};  // only lines bound for a terminal move the status line
  std::array<bool, 2> broken_{false, false};
  int status_fd_;
  bool status_broken_ = false;
  std::string status_;    // "\r\x1b[K" + text, as drawn; empty when not shown
  std::string combined_;  // reused: erase + bytes + redraw in one write
};

}  // namespace sgpu::launcher
