#pragma once
// Appends to the run's log files on a thread of its own. The event loop's
// thread reads the ranks' pipes and writes the console; this one writes the
// logs, so the two copies of every byte a rank prints (console, log) are made
// on two cores, and a slow disk never holds up the timers or signals.
//
// Bytes are written in the order they were queued. While more than kPauseAt
// bytes wait, the thread pauses its OutputFlow and the supervisor stops
// reading the pipes (the ranks then wait for the disk, as they would writing
// a file themselves) until the queue is under kResumeAt. A caller that does
// not honour the flow (output that arrives over the network) is held once
// kLimit bytes wait, as a write to the disk would hold it. The thread starts
// on the first append: a job that prints nothing never has one.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "sgpu/launcher/outputs/run_files.hpp"
#include "sgpu/launcher/process/output_flow.hpp"

namespace sgpu::launcher {

class FileWriterThread {
 public:
  static constexpr std::size_t kPauseAt = 4 << 20;
  static constexpr std::size_t kResumeAt = 1 << 20;
  static constexpr std::size_t kLimit = 16 << 20;

  // The flow is resumed on `io`'s thread.
  explicit FileWriterThread(boost::asio::io_context& io);
  // Writes what is queued, then ends the thread.
  ~FileWriterThread();
  FileWriterThread(const FileWriterThread&) = delete;
  FileWriterThread& operator=(const FileWriterThread&) = delete;

  // Queues a copy of `bytes` for `file`, which must stay where it is until
  // drain() returns. Called from the loop's thread only.
  void append(AppendFile& file, std::string_view bytes);
  // Returns once every queued byte is written (or failed: see AppendFile's
  // error()): before the files are read, moved, replaced or closed.
  void drain();

  const std::shared_ptr<OutputFlow>& flow() const { return flow_; }

 private:
  struct Block {
    AppendFile* file;
    std::string bytes;
  };
  using WorkGuard = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;

  void run();

  boost::asio::io_context& io_;
  std::shared_ptr<OutputFlow> flow_ = std::make_shared<OutputFlow>();
  std::mutex mutex_;
  std::condition_variable work_;  // to the writer: a block, or stop
  std::condition_variable done_;  // to the loop: the queue shrank
  std::deque<Block> queue_;
  std::vector<std::string> spare_;  // written blocks' buffers, for reuse
  std::size_t queued_ = 0;          // bytes queued or being written
  bool paused_ = false;
  // While the flow is paused the loop must not run out of work: the resume
  // comes from this thread. Moved into the resume handler.
  std::shared_ptr<WorkGuard> hold_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sgpu::launcher
