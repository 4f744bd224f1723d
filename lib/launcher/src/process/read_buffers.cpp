#include "sgpu/launcher/process/read_buffers.hpp"

namespace sgpu::launcher {

ReadBuffers::ReadBuffers(std::size_t size, std::size_t keep) : size_(size), pool_(std::make_shared<Pool>()) {
  pool_->keep = keep;
}

char* ReadBuffers::current() {
  // Only this thread hands out copies of current_: once it holds the only
  // one, no other thread can take one.
  if (current_ && current_.use_count() == 1) return data_;
  std::unique_ptr<char[]> buffer;
  {
    std::lock_guard lock(pool_->mutex);
    if (!pool_->free.empty()) {
      buffer = std::move(pool_->free.back());
      pool_->free.pop_back();
    }
  }
  if (!buffer) buffer.reset(new char[size_]);  // NOLINT: uninitialised on purpose, read() fills it
  data_ = buffer.get();
  // The last holder, on any thread, gives it back to the pool (which every
  // buffer keeps alive) or frees it.
  current_ = std::shared_ptr<char>(buffer.release(), [pool = pool_](char* bytes) {
    std::unique_ptr<char[]> back(bytes);
    std::lock_guard lock(pool->mutex);
    if (pool->free.size() < pool->keep) pool->free.push_back(std::move(back));
  });
  return data_;
}

std::size_t ReadBuffers::spare() const {
  std::lock_guard lock(pool_->mutex);
  return pool_->free.size();
}

}  // namespace sgpu::launcher
