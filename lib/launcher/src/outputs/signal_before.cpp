#include "sgpu/launcher/outputs/signal_before.hpp"

#include <fmt/format.h>

#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/io/run_files.hpp"

namespace sgpu::launcher {

std::string signal_before_line(const SignalBeforeSent& s) {
  if (!s.sent_at) {
    auto left = std::chrono::duration_cast<env::Seconds>(s.deadline - Clock::now());
    return fmt::format(
        "sgpu: warning: --signal-before {}: the run's deadline ({}) is only {} away; no signal will be sent\n",
        env::format_signal_before(s.signal), iso_time(s.deadline),
        left.count() > 0 ? env::format_duration(left) : "0s");
  }
  return fmt::format("sgpu: {} to every rank: {} before the run's deadline ({})\n", env::signal_name(s.signal.signal),
                     env::format_duration(s.signal.before), iso_time(s.deadline));
}

nlohmann::ordered_json signal_before_json(const SignalBeforeSent& s) {
  return {{"signal", env::signal_name(s.signal.signal)},
          {"before_s", s.signal.before.count()},
          {"deadline", iso_time(s.deadline)},
          {"sent_at", s.sent_at ? nlohmann::ordered_json(iso_time(*s.sent_at)) : nlohmann::ordered_json(nullptr)}};
}

}  // namespace sgpu::launcher
