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
//
// The loop wakes the thread once per turn, not once per piece: an append
// posts one wake-up to the loop, which runs after the reads already queued
// there, and an awake thread takes what comes until its queue is empty. Under
// load that is one wake-up per round of reads instead of one per read, and
// fewer, longer runs of the writer on its core; a line from a quiet job
// waits one turn of the loop. A pause (kPauseAt), a held caller (kLimit) and
// drain() wake it at once.
//
// Most bytes are queued without a copy, so the loop's thread spends its time
// reading the pipes: a big piece that was read keeps its read buffer alive
// (the owner the supervisor hands out). A block may carry a Render, which
// turns its bytes into what is written on this thread: the console's
// prefixed lines are made here, not on the loop's thread.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/process/events.hpp"
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

  // Pieces at least this big are queued by their owner, smaller ones copied:
  // a queue of small pieces never holds big read buffers.
  static constexpr std::size_t kShareFrom = 64 << 10;

  // Makes what a block writes, on the writer's thread, from its bytes;
  // `out` is empty. Called in the order the blocks were queued.
  using Render = std::function<void(std::string_view bytes, std::string& out)>;
  // Queues `bytes` for `file`, which must stay where it is until drain()
  // returns. Called from the loop's thread only. A copy is queued, or, when
  // `bytes` is big (kShareFrom), `owner` instead. With `render`, what it
  // makes of the bytes is written; such a block is queued even with no
  // bytes (a render that writes what it held back).
  void append(AppendFile& file, std::string_view bytes, const BytesOwner& owner = nullptr, Render render = nullptr);
  // Returns once every queued byte is written (or failed: see AppendFile's
  // error()): before the files are read, moved, replaced or closed.
  void drain();

  const std::shared_ptr<OutputFlow>& flow() const { return flow_; }

 private:
  struct Block {
    AppendFile* file;
    std::string copy;         // the bytes, when they are the queue's own
    BytesOwner owner;         // else what keeps them alive:
    std::string_view shared;  // the bytes
    Render render;            // none: the bytes are written as they are
    std::string_view bytes() const { return owner ? shared : std::string_view(copy); }
  };
  using WorkGuard = boost::asio::executor_work_guard<boost::asio::io_context::executor_type>;

  // Queues `block`, waiting while kLimit bytes wait. Called without mutex_.
  void enqueue(Block block);
  void run();

  boost::asio::io_context& io_;
  std::shared_ptr<OutputFlow> flow_ = std::make_shared<OutputFlow>();
  std::mutex mutex_;
  std::condition_variable work_;  // to the writer: a block, or stop
  std::condition_variable done_;  // to the loop: the queue shrank
  std::deque<Block> queue_;
  std::vector<std::string> spare_;  // written blocks' buffers, for reuse
  std::string rendered_;            // the writer's: what a Render made
  std::size_t queued_ = 0;          // bytes queued or being written
  bool paused_ = false;
  bool awake_ = false;                                      // the thread takes blocks until the queue is empty
  bool wake_posted_ = false;                                // a wake-up waits on the loop
  std::shared_ptr<char> alive_ = std::make_shared<char>();  // expires with this: a late wake-up touches nothing
  // While the flow is paused the loop must not run out of work: the resume
  // comes from this thread. Moved into the resume handler.
  std::shared_ptr<WorkGuard> hold_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace sgpu::launcher
