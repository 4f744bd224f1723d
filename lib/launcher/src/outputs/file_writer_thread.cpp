#include "sgpu/launcher/outputs/file_writer_thread.hpp"

#include <pthread.h>
#include <csignal>

#include <boost/asio/post.hpp>

namespace sgpu::launcher {

namespace {
constexpr std::size_t kSpareBuffers = 8;
}  // namespace

FileWriterThread::FileWriterThread(boost::asio::io_context& io) : io_(io) {}

FileWriterThread::~FileWriterThread() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void FileWriterThread::append(AppendFile& file, std::string_view bytes) {
  if (bytes.empty()) return;
  if (!thread_.joinable()) {
    // Signals are the loop's business (Asio's signal set): none for this thread.
    sigset_t all;
    sigset_t before;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &before);
    thread_ = std::thread([this] { run(); });
    ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  }
  bool pause = false;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return queued_ < kLimit; });
    std::string buffer;
    if (!spare_.empty()) {
      buffer = std::move(spare_.back());
      spare_.pop_back();
    }
    buffer.assign(bytes);
    queue_.push_back({&file, std::move(buffer)});
    queued_ += bytes.size();
    if (queued_ >= kPauseAt && !paused_) {
      paused_ = pause = true;
      hold_ = std::make_shared<WorkGuard>(io_.get_executor());
    }
  }
  work_.notify_one();
  // The resume, posted by the writer, runs on this thread after this returns.
  if (pause) flow_->pause();
}

void FileWriterThread::drain() {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [this] { return queued_ == 0; });
}

void FileWriterThread::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopped, and all written
    Block block = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    block.file->append(block.bytes);
    lock.lock();
    queued_ -= block.bytes.size();
    if (spare_.size() < kSpareBuffers) {
      block.bytes.clear();
      spare_.push_back(std::move(block.bytes));
    }
    if (paused_ && queued_ <= kResumeAt) {
      paused_ = false;
      boost::asio::post(io_, [flow = flow_, hold = std::move(hold_)] { flow->resume(); });
    }
    done_.notify_all();
  }
}

}  // namespace sgpu::launcher
