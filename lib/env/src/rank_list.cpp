#include "sgpu/env/rank_list.hpp"

#include <charconv>
#include <optional>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::env {
namespace {

std::optional<int> parse_int(std::string_view s) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

std::vector<int> parse_rank_list(std::string_view text, std::string_view what) {
  auto bad = [&](std::string_view item) {
    return Error(fmt::format("{} {}: '{}' is not a rank; give ranks and ranges like 0,3 or 0-3,7", what, text, item));
  };
  std::vector<int> ranks;
  std::size_t start = 0;
  while (start <= text.size()) {
    auto comma = text.find(',', start);
    auto item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    auto dash = item.find('-');
    auto lo = parse_int(item.substr(0, dash));
    auto hi = dash == std::string_view::npos ? lo : parse_int(item.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi < *lo) throw bad(item);
    if (*hi - *lo > 1 << 20) throw bad(item);
    for (int r = *lo; r <= *hi; ++r) ranks.push_back(r);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return ranks;
}

}  // namespace sgpu::env
