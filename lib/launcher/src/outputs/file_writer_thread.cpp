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

void FileWriterThread::append(AppendFile& file, std::string_view bytes, const BytesOwner& owner, Render render) {
  if (bytes.empty() && !render) return;
  Block block{&file, {}, nullptr, {}, std::move(render)};
  if (owner && bytes.size() >= kShareFrom) {
    block.owner = owner;
    block.shared = bytes;
  } else {
    {
      std::lock_guard lock(mutex_);
      if (!spare_.empty()) {
        block.copy = std::move(spare_.back());
        spare_.pop_back();
      }
    }
    block.copy.assign(bytes);
  }
  enqueue(std::move(block));
}

void FileWriterThread::enqueue(Block block) {
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
  bool wake = false;
  bool post_wake = false;
  {
    std::unique_lock lock(mutex_);
    if (queued_ >= kLimit) {  // held until the writer made room: it must be awake for that
      awake_ = true;
      work_.notify_one();
    }
    done_.wait(lock, [this] { return queued_ < kLimit; });
    queued_ += block.bytes().size();
    queue_.push_back(std::move(block));
    if (queued_ >= kPauseAt && !paused_) {
      paused_ = pause = true;
      hold_ = std::make_shared<WorkGuard>(io_.get_executor());
    }
    if (pause) {
      awake_ = wake = true;  // the reads stop until it writes: now
    } else if (!awake_ && !wake_posted_) {
      wake_posted_ = true;
      post_wake = true;
    }
  }
  if (wake) work_.notify_one();
  if (post_wake)
    boost::asio::post(io_, [this, alive = std::weak_ptr<char>(alive_)] {
      if (alive.expired()) return;
      {
        std::lock_guard lock(mutex_);
        wake_posted_ = false;
        if (queue_.empty()) return;  // drain() had it all written
        awake_ = true;
      }
      work_.notify_one();
    });
  // The resume, posted by the writer, runs on this thread after this returns.
  if (pause) flow_->pause();
}

void FileWriterThread::drain() {
  std::unique_lock lock(mutex_);
  if (!queue_.empty()) {
    awake_ = true;
    work_.notify_one();
  }
  done_.wait(lock, [this] { return queued_ == 0; });
}

void FileWriterThread::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    // Awake only while there is work: set with a block queued (and a
    // notify), cleared here once the queue is empty, so an append either
    // finds the thread still taking blocks or posts a wake-up.
    if (queue_.empty()) awake_ = false;
    work_.wait(lock, [this] { return stop_ || (awake_ && !queue_.empty()); });
    if (queue_.empty()) return;  // stopped, and all written
    Block block = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    auto bytes = block.bytes();
    if (block.render) {
      rendered_.clear();
      block.render(bytes, rendered_);
      if (!rendered_.empty()) block.file->append(rendered_);
    } else {
      block.file->append(bytes);
    }
    bool owned = block.owner != nullptr;
    block.owner.reset();  // the read buffer goes back to its pool now, not under the lock
    lock.lock();
    queued_ -= bytes.size();
    if (!owned && spare_.size() < kSpareBuffers) {
      block.copy.clear();
      spare_.push_back(std::move(block.copy));
    }
    if (paused_ && queued_ <= kResumeAt) {
      paused_ = false;
      boost::asio::post(io_, [flow = flow_, hold = std::move(hold_)] { flow->resume(); });
    }
    done_.notify_all();
  }
}

}  // namespace sgpu::launcher
