#pragma once
// Durations as users write them: "90m", "2h30m", "1h5m10s", "3600" (seconds),
// "1.5h", "none" (no limit), from kMinDuration to kMaxDuration; each unit at
// most once, the largest first. Parsing is pure and throws sgpu::Error.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace sgpu::env {

using Seconds = std::chrono::duration<double>;

// The longest limit sgpu accepts, 365 days: far beyond any job, and far
// inside what the event loop's timers (nanoseconds in 64 bits) can hold.
inline constexpr Seconds kMaxDuration{365.0 * 86400};

// The shortest, 1 ms: timers, summaries and messages count milliseconds, so
// less would be a limit that ends at once and reads "0ms".
inline constexpr Seconds kMinDuration{0.001};

// Returns nullopt for "none" (no limit), the only spelling of it. `what`
// names the flag or key in error messages, e.g. "--timeout"; `none_ok` says
// whether the messages may suggest "none" (the caller refuses a nullopt
// where no limit is not valid).
std::optional<Seconds> parse_duration(std::string_view text, std::string_view what, bool none_ok = true);

// "3h", "1h30m", "45s", "1.5s", "250ms".
std::string format_duration(Seconds d);

// A limit that must be finite and positive (--join-timeout, --heartbeat-timeout):
// "none" or zero is refused with a message starting with `where`.
Seconds parse_limit(std::string_view text, const std::string& where);

// A duration as a job's spec holds it: parsed once, where the value is set
// (a flag, a TOML key, the job the launcher sent), and kept both as the
// value every layer uses and as the user's spelling, which dry runs, errors
// and the job sent to the nodes repeat.
class Duration {
 public:
  // Throws sgpu::Error naming `what` (parse_duration's message).
  Duration(std::string_view text, std::string_view what, bool none_ok = true);
  // A default written in the code ("3h", "none"): valid by construction.
  Duration(const char* text) : Duration(text, "a built-in default") {}  // NOLINT(google-explicit-constructor)

  const std::string& text() const { return text_; }
  // nullopt: "none", no limit.
  const std::optional<Seconds>& limit() const { return value_; }
  // The limit where "none" was refused when it was set (the key says
  // none_ok = false); where it was not, `where` names it: "<where>: give a
  // limit, e.g. 10s".
  Seconds required(const std::string& where) const;

  bool operator==(const Duration& other) const { return text_ == other.text_; }

 private:
  std::string text_;
  std::optional<Seconds> value_;
};

}  // namespace sgpu::env
