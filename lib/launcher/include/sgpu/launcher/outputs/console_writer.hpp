#pragma once
// One of sgpu's console descriptors (stdout, stderr), written without ever
// blocking the event loop: what the reader does not take now waits in a
// buffer and goes out when the descriptor is writable again.
//
// A pipe or terminal is opened again through /proc/self/fd with O_NONBLOCK:
// a description of sgpu's own, so the shell's (shared) one is never switched
// to non-blocking. A socket gets send(MSG_DONTWAIT). A regular file (or
// anything else) does not wait on a reader, but its writes copy every byte
// into the page cache and may wait for a slow disk: a regular file is
// written on a FileWriterThread, as the run logs are, so neither the copying
// nor the disk holds up the event loop.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/outputs/file_writer_thread.hpp"

namespace sgpu::launcher {

class ConsoleWriter {
 public:
  // `on_drained` runs when the buffer drops below `low_water` after a wait.
  // `files` writes a regular file's bytes; it must outlive the writer's last
  // write and finish().
  ConsoleWriter(boost::asio::io_context& io, int fd, std::size_t low_water, std::size_t limit,
                std::function<void()> on_drained, FileWriterThread& files);
  ~ConsoleWriter();
  ConsoleWriter(const ConsoleWriter&) = delete;
  ConsoleWriter& operator=(const ConsoleWriter&) = delete;

  // Never blocks. Bytes beyond `limit` waiting are dropped and counted.
  void write(std::string_view bytes);
  // A regular file's writer (threaded()) can make what it writes on its
  // thread: `render` turns `bytes` (kept by `owner`, or copied) into it there.
  bool threaded() const { return mode_ == Mode::Threaded; }
  void render(std::string_view bytes, const BytesOwner& owner, FileWriterThread::Render render);
  std::size_t pending() const { return buffer_.size() - head_; }
  // The reader went away (EPIPE): the job goes on, unprinted.
  bool broken() const { return broken_; }
  int fd() const { return fd_; }

  // From now on nothing waits on the event loop for the reader (so the loop
  // can end): what waits is tried again at each write and at finish().
  void stop_waiting();

  // At the job's end: with `wait`, blocks until the reader took everything
  // (as writing to a plain pipe would); without, writes what it can now and
  // drops the rest. Returns every byte dropped, before and now.
  std::size_t finish(bool wait);

 private:
  enum class Mode { Blocking, NonBlocking, Socket, Threaded };
  long write_some(std::string_view bytes);  // bytes taken; 0 when it would block; -1 broken
  void flush();
  void arm();

  int fd_;
  int own_fd_ = -1;  // the reopened (or, for a socket, duplicated) fd
  Mode mode_ = Mode::Blocking;
  std::unique_ptr<boost::asio::posix::stream_descriptor> ready_;  // writability waits
  std::size_t low_water_;
  std::size_t limit_;
  std::function<void()> on_drained_;
  std::string buffer_;
  std::size_t head_ = 0;
  std::size_t dropped_ = 0;
  bool armed_ = false;
  bool waiting_ = true;
  // Expires with this writer: an aborted wait that runs after it is gone
  // (the loop outlives the console in a multi-node launcher) touches nothing.
  std::shared_ptr<char> alive_ = std::make_shared<char>();
  bool broken_ = false;
  FileWriterThread* files_ = nullptr;  // Mode::Threaded: writes file_
  AppendFile file_;
};

}  // namespace sgpu::launcher
