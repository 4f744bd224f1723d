#include "sgpu/env/duration.hpp"

#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::env {
namespace {

struct Problem {
  std::string_view text, what;
  bool none_ok;

  // The valid forms name "none" only where it is valid.
  [[noreturn]] void operator()(std::string_view why) const {
    throw Error(fmt::format("{}: invalid duration '{}': {}; valid forms: 3600, 90s, 90m, 2h30m, 1.5h{}", what, text,
                            why, none_ok ? ", none" : ""));
  }
};

struct Unit {
  std::string_view name;
  double seconds;
  int order;  // units go from the largest (0) to the smallest
};

constexpr Unit kUnits[] = {{"d", 86400, 0}, {"h", 3600, 1}, {"m", 60, 2},    {"min", 60, 2},
                           {"s", 1, 3},     {"sec", 1, 3},  {"ms", 0.001, 4}};

const Unit* find_unit(std::string_view name) {
  for (const auto& u : kUnits)
    if (u.name == name) return &u;
  return nullptr;
}

}  // namespace

std::optional<Seconds> parse_duration(std::string_view text, std::string_view what, bool none_ok) {
  if (text == "none") return std::nullopt;
  const Problem bad{text, what, none_ok};
  if (text.empty()) bad("it is empty");
  double total = 0;
  std::size_t i = 0;
  const Unit* last = nullptr;
  while (i < text.size()) {
    std::size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (start == i) bad(fmt::format("expected a number at position {}", start + 1));
    double value = 0;
    auto [ptr, ec] = std::from_chars(text.data() + start, text.data() + i, value);
    if (ec != std::errc() || ptr != text.data() + i) bad("malformed number");
    std::size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit = text.substr(unit_start, i - unit_start);
    if (unit.empty()) {
      if (i != text.size() || last != nullptr) bad("a bare number must stand alone (it means seconds)");
      total += value;
      break;
    }
    const Unit* u = find_unit(unit);
    if (u == nullptr) bad(fmt::format("unknown unit '{}' (use ms, s, m, h, d)", unit));
    // "2h30m30m" or "30m2h" is a typo more likely than a sum.
    if (last != nullptr && u->order == last->order) bad(fmt::format("'{}' is given twice", unit));
    if (last != nullptr && u->order < last->order) bad("units go from the largest to the smallest (d, h, m, s, ms)");
    last = u;
    total += value * u->seconds;
  }
  if (!std::isfinite(total) || total > kMaxDuration.count())
    bad(fmt::format("it is too large (at most {}d)", kMaxDuration.count() / 86400));
  if (total <= 0)
    bad(none_ok ? "it must be greater than zero (use 'none' for no limit)" : "it must be greater than zero");
  // Timers, the summary and the messages count milliseconds: less would be
  // an instant timeout shown as "0ms".
  if (total < kMinDuration.count()) bad("it is under 1ms, the shortest duration sgpu counts");
  return Seconds(total);
}

namespace {
// x rounded half away from zero, as std::llround does, for the durations
// sgpu shows (0 to 365 days): without libm, which the portable binary then
// does not load (its 330 KiB of RSS, and a library's load, each launch).
long long rounded(double x) { return static_cast<long long>(x < 0 ? x - 0.5 : x + 0.5); }
}  // namespace

std::string format_duration(Seconds d) {
  double s = d.count();
  if (s < 1) return fmt::format("{}ms", rounded(s * 1000));
  if (s < 60) {
    auto tenths = rounded(s * 10);
    return tenths % 10 == 0 ? fmt::format("{}s", tenths / 10) : fmt::format("{}.{}s", tenths / 10, tenths % 10);
  }
  auto total = rounded(s);
  long long h = total / 3600, m = (total % 3600) / 60, sec = total % 60;
  std::string out;
  if (h) out += fmt::format("{}h", h);
  if (m) out += fmt::format("{}m", m);
  if (sec) out += fmt::format("{}s", sec);
  return out;
}

Seconds parse_limit(std::string_view text, const std::string& where) {
  return Duration(text, where, false).required(where);
}

Duration::Duration(std::string_view text, std::string_view what, bool none_ok)
    : text_(text), value_(parse_duration(text, what, none_ok)) {}

Seconds Duration::required(const std::string& where) const {
  if (!value_) throw Error(fmt::format("{}: give a limit, e.g. 10s", where));
  return *value_;
}

}  // namespace sgpu::env
