#pragma once
// Signals as users name them for stopping a job well: `--stop-signal TERM`
// (what a stopped rank gets first) and `--signal-before USR2@5m` (a signal
// every rank gets once, that long before the run's deadline, to checkpoint).
// Pure parsing; errors are sgpu::Error (exit 2) naming the flag or key.
#include <optional>
#include <string>
#include <string_view>

#include "sgpu/env/duration.hpp"

namespace sgpu::env {

struct SignalBefore {
  int signal = 0;
  Seconds before{0};
  bool operator==(const SignalBefore&) const = default;
};

// "USR2", "SIGUSR2", "usr2" or "12" -> 12. KILL and STOP are refused (no
// process can catch them, so no rank could act on them), as are numbers
// outside 1..SIGRTMAX. `what` names the flag or key in the message.
int parse_signal(std::string_view text, std::string_view what);

// "USR2@5m" -> {SIGUSR2, 300 s}; "" or "none" -> nullopt (no such signal).
std::optional<SignalBefore> parse_signal_before(std::string_view text, std::string_view what);

// "SIGUSR2@5m": how it is shown (console, summary, dry run).
std::string format_signal_before(const SignalBefore& s);

}  // namespace sgpu::env
