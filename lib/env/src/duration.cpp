#include "sgpu/env/duration.hpp"

#include <cctype>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::env {
namespace {

[[noreturn]] void bad(std::string_view text, std::string_view what, std::string_view why) {
  throw Error(
      fmt::format("{}: invalid duration '{}': {}; valid forms: 3600, 90s, 90m, 2h30m, 1.5h, none", what, text, why));
}

double unit_seconds(std::string_view unit) {
  if (unit == "ms") return 0.001;
  if (unit == "s" || unit == "sec") return 1;
  if (unit == "m" || unit == "min") return 60;
  if (unit == "h") return 3600;
  if (unit == "d") return 86400;
  return -1;
}

}  // namespace

std::optional<Seconds> parse_duration(std::string_view text, std::string_view what) {
  if (text == "none" || text == "inf" || text == "infinity") return std::nullopt;
  if (text.empty()) bad(text, what, "it is empty");
  double total = 0;
  std::size_t i = 0;
  bool any_unit = false;
  while (i < text.size()) {
    std::size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (start == i) bad(text, what, fmt::format("expected a number at position {}", start + 1));
    double value = 0;
    auto [ptr, ec] = std::from_chars(text.data() + start, text.data() + i, value);
    if (ec != std::errc() || ptr != text.data() + i) bad(text, what, "malformed number");
    std::size_t unit_start = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit = text.substr(unit_start, i - unit_start);
    if (unit.empty()) {
      if (i != text.size() || any_unit) bad(text, what, "a bare number must stand alone (it means seconds)");
      total += value;
      break;
    }
    double factor = unit_seconds(unit);
    if (factor < 0) bad(text, what, fmt::format("unknown unit '{}' (use ms, s, m, h, d)", unit));
    any_unit = true;
    total += value * factor;
  }
  if (!std::isfinite(total) || total > kMaxDuration.count())
    bad(text, what, fmt::format("it is too large (at most {}d)", kMaxDuration.count() / 86400));
  if (total <= 0) bad(text, what, "it must be greater than zero (use 'none' for no limit)");
  return Seconds(total);
}

std::string format_duration(Seconds d) {
  double s = d.count();
  if (s < 1) return fmt::format("{}ms", static_cast<long long>(std::llround(s * 1000)));
  if (s < 60) {
    double r = std::round(s * 10) / 10;
    return r == std::floor(r) ? fmt::format("{}s", static_cast<long long>(r)) : fmt::format("{:.1f}s", r);
  }
  auto total = static_cast<long long>(std::llround(s));
  long long h = total / 3600, m = (total % 3600) / 60, sec = total % 60;
  std::string out;
  if (h) out += fmt::format("{}h", h);
  if (m) out += fmt::format("{}m", m);
  if (sec) out += fmt::format("{}s", sec);
  return out;
}

Seconds parse_limit(std::string_view text, const std::string& where) {
  auto d = parse_duration(text, where);
  if (!d || d->count() <= 0) throw Error(fmt::format("{}: give a limit, e.g. 10s", where));
  return *d;
}

}  // namespace sgpu::env
