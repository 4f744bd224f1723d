#pragma once
// Backpressure from the console to the supervisor: while whoever reads sgpu's
// output lags, the console pauses the flow and the supervisor stops reading
// the ranks' pipes, so the ranks block on a full pipe as they would writing
// to the reader directly. Once the job ends (teardown, every rank exited)
// the console releases the flow for good: nothing may then wait on a reader.
#include <functional>
#include <utility>
#include <vector>

namespace sgpu::launcher {

class OutputFlow {
 public:
  bool paused() const { return paused_ && !released_; }
  // Runs `resume` now if output may flow, else once it may again.
  void when_open(std::function<void()> resume) {
    if (!paused()) {
      resume();
      return;
    }
    waiting_.push_back(std::move(resume));
  }
  void pause() { paused_ = true; }
  void resume() {
    paused_ = false;
    run_waiting();
  }
  // For good: no more pauses.
  void release() {
    released_ = true;
    run_waiting();
  }
  // The owner of the waiting callbacks is gone.
  void forget_waiting() { waiting_.clear(); }

 private:
  void run_waiting() {
    auto waiting = std::exchange(waiting_, {});
    for (auto& resume : waiting) resume();
  }
  bool paused_ = false;
  bool released_ = false;
  std::vector<std::function<void()>> waiting_;
};

}  // namespace sgpu::launcher
