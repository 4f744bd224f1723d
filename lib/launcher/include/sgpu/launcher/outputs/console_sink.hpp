#pragma once
// Where the console goes: the file descriptors that get the job's stdout and
// stderr lines, and the live status line kept below them on a terminal. The
// status line is erased before any job bytes are written and drawn again
// after, so it never lands inside a job's line.
//
// Writes never block the event loop (ConsoleWriter). While the reader lags
// by more than kPauseAt bytes, the sink pauses its OutputFlow: the supervisor
// stops reading the ranks' pipes until the reader catches up. Once the job
// ends the flow is released and up to kLimit bytes wait for the reader;
// beyond that the console (never the run logs) drops them, and says so.
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/launcher/outputs/console_writer.hpp"
#include "sgpu/launcher/outputs/file_writer_thread.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/output_flow.hpp"

namespace sgpu::launcher {

class ConsoleSink {
 public:
  static constexpr std::size_t kPauseAt = 1 << 20;
  static constexpr std::size_t kResumeAt = 256 << 10;
  static constexpr std::size_t kLimit = 64 << 20;

  // `status_fd` is a terminal to draw the status line on (one of the two
  // others), or -1 for none.
  ConsoleSink(boost::asio::io_context& io, int out_fd, int err_fd, int status_fd = -1);
  ConsoleSink(const ConsoleSink&) = delete;  // its writers call back into it
  ConsoleSink& operator=(const ConsoleSink&) = delete;

  // Queues `bytes` (whole lines) for the stream's descriptor; never blocks.
  void write(Stream stream, std::string_view bytes);
  // Whether the stream's descriptor is a regular file, written on the
  // sink's file thread: then the job's lines for it are made there (render).
  bool renders(Stream stream) { return stream_writer(stream).threaded(); }
  // Queues `bytes` for a stream that renders(); `render` makes the lines
  // from them on the file thread, in order with everything else written.
  void render(Stream stream, std::string_view bytes, const BytesOwner& owner, FileWriterThread::Render render);

  bool has_status() const { return status_fd_ >= 0; }
  // Draws `text` as the status line (cut to the terminal's width).
  void set_status(std::string_view text);
  // Erases the status line for good, e.g. before the final report.
  void clear_status();

  // The reader's backpressure, and the disk's where the console is a file.
  std::vector<std::shared_ptr<OutputFlow>> flows() const;
  // The job is ending: no more backpressure, and nothing left on the event
  // loop for the reader (the loop ends with the job).
  void release();
  // Hands the rest to the reader: with `wait`, blocking until it took it all;
  // without, what it takes now. Returns the bytes the console never showed.
  std::size_t finish(bool wait);

 private:
  ConsoleWriter& stream_writer(Stream stream) { return *writers_[stream == Stream::Out ? 0 : index_err_]; }
  void on_drained();
  void check_pause();

  std::shared_ptr<OutputFlow> flow_ = std::make_shared<OutputFlow>();
  std::array<std::unique_ptr<ConsoleWriter>, 2> writers_;  // [1] is null when stdout and stderr are one fd
  // Writes the console's regular files, in the order written (stdout and
  // stderr both, when both are files); its thread starts on the first byte,
  // so a console of pipes and terminals never has one. Declared after
  // writers_: it drains into their files before they close.
  FileWriterThread files_;
  std::size_t index_err_ = 1;
  std::array<bool, 2> terminal_{false, false};  // only lines bound for a terminal move the status line
  int status_fd_;
  std::size_t status_writer_ = 1;
  std::string status_;    // "\r\x1b[K" + text, as drawn; empty when not shown
  std::string combined_;  // reused: erase + bytes + redraw in one write
};

}  // namespace sgpu::launcher
