#pragma once
// The buffers the supervisor reads the ranks' pipes into. Every read goes
// into the current buffer, handed to the observers with its owner
// (BytesOwner); one that keeps the bytes (the log writer's queue) keeps the
// owner, and the next read then takes another buffer. A buffer let go by its
// last holder, on whatever thread, waits in the pool for the next read, so a
// steady stream of output neither copies its bytes for the logs nor touches
// new memory.
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

class ReadBuffers {
 public:
  // Buffers of `size` bytes; at most `keep` unused ones stay in the pool.
  ReadBuffers(std::size_t size, std::size_t keep);

  // The buffer to read into now: the last one, unless an observer kept it.
  // Its owner() is what to hand out with the bytes read into it.
  char* current();
  const BytesOwner& owner() const { return current_; }
  std::size_t size() const { return size_; }
  // Buffers now waiting in the pool (for tests).
  std::size_t spare() const;

 private:
  struct Pool {
    std::mutex mutex;
    std::vector<std::unique_ptr<char[]>> free;
    std::size_t keep;
  };

  std::size_t size_;
  std::shared_ptr<Pool> pool_;
  BytesOwner current_;
  char* data_ = nullptr;  // current_'s bytes
};

}  // namespace sgpu::launcher
