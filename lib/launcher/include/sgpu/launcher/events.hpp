#pragma once
// What the supervisor reports while a job runs. The supervisor only handles
// processes; observers (console printer, logs, the report) decide what to show.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "sgpu/env/exit_code.hpp"

namespace sgpu::launcher {

enum class Stream { Out, Err };
using Clock = std::chrono::system_clock;

class JobObserver {
 public:
  virtual ~JobObserver() = default;
  virtual void on_rank_started(int /*rank*/, int /*pid*/) {}
  // Raw bytes as read from the rank's pipe: not split into lines.
  virtual void on_rank_output(int /*rank*/, Stream /*stream*/, std::string_view /*bytes*/) {}
  // The pipe reached end of file: flush a partial last line.
  virtual void on_rank_output_closed(int /*rank*/, Stream /*stream*/) {}
  virtual void on_rank_exited(int /*rank*/, const env::ExitStatus& /*status*/, bool /*terminated_by_sgpu*/) {}
  // The first reason to stop the job: a rank failed, the timeout, a signal.
  virtual void on_teardown(const env::JobEnd& /*cause*/) {}
};

}  // namespace sgpu::launcher
