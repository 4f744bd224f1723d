#include "sgpu/env/stop_signal.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <csignal>
#include <cstring>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/exit_code.hpp"

namespace sgpu::env {
namespace {

constexpr std::string_view kValidSignals =
    "a signal name or number a process can catch, e.g. TERM, INT, USR1, USR2, HUP (not KILL or STOP)";

std::string upper(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::toupper(c); });
  return out;
}

}  // namespace

int parse_signal(std::string_view text, std::string_view what) {
  auto name = upper(text);
  if (name.starts_with("SIG")) name.erase(0, 3);
  int sig = 0;
  if (!name.empty() && std::isdigit(static_cast<unsigned char>(name.front()))) {
    auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), sig);
    if (ec != std::errc() || end != name.data() + name.size() || sig < 1 || sig > SIGRTMAX) sig = 0;
  } else if (!name.empty()) {
    for (int s = 1; s < NSIG && sig == 0; ++s) {
      const char* abbrev = sigabbrev_np(s);
      if (abbrev != nullptr && name == abbrev) sig = s;
    }
  }
  if (sig == 0) throw Error(fmt::format("{} {}: not a signal; expected {}", what, text, kValidSignals));
  if (sig == SIGKILL || sig == SIGSTOP)
    throw Error(fmt::format("{} {}: {} cannot be caught, so no rank could act on it; expected {}", what, text,
                            signal_name(sig), kValidSignals));
  return sig;
}

std::optional<SignalBefore> parse_signal_before(std::string_view text, std::string_view what) {
  if (text.empty() || text == "none") return std::nullopt;
  auto at = text.find('@');
  if (at == std::string_view::npos || at == 0 || at + 1 == text.size())
    throw Error(
        fmt::format("{} {}: expected SIGNAL@DURATION, e.g. USR2@5m (the signal every rank gets that long "
                    "before the run's deadline), or none",
                    what, text));
  SignalBefore out;
  out.signal = parse_signal(text.substr(0, at), what);
  auto before = parse_duration(text.substr(at + 1), fmt::format("{} {}", what, text), false);
  if (!before) throw Error(fmt::format("{} {}: the time before the deadline needs a length, e.g. USR2@5m", what, text));
  out.before = *before;
  return out;
}

std::string format_signal_before(const SignalBefore& s) {
  return fmt::format("{}@{}", signal_name(s.signal), format_duration(s.before));
}

}  // namespace sgpu::env
