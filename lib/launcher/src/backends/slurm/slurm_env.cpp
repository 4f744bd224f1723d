#include "backends/slurm/slurm_env.hpp"

#include <charconv>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher::slurm {
namespace {

// Reads a non-negative int at `pos` and moves past it; -1 when there is none.
int read_int(std::string_view text, std::size_t& pos) {
  if (pos >= text.size() || text[pos] == '+' || text[pos] == '-') return -1;
  int n = 0;
  auto [ptr, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), n);
  if (ec != std::errc()) return -1;
  pos = static_cast<std::size_t>(ptr - text.data());
  return n;
}

}  // namespace

std::vector<int> parse_slurm_counts(std::string_view text, std::string_view what) {
  auto fail = [&](std::size_t at, std::string_view why) {
    throw Error(
        fmt::format("{}: invalid value '{}': {} at column {}; valid forms: 4 or 2(x3),1", what, text, why, at + 1));
  };
  if (text.empty()) fail(0, "it is empty");
  std::vector<int> counts;
  std::size_t pos = 0;
  while (true) {
    std::size_t start = pos;
    int count = read_int(text, pos);
    if (count < 0) fail(start, "expected a number");
    int repeat = 1;
    if (text.substr(pos, 2) == "(x") {
      std::size_t repeat_at = pos += 2;
      repeat = read_int(text, pos);
      if (repeat <= 0) fail(repeat_at, "expected a repeat count above 0");
      if (pos == text.size() || text[pos] != ')') fail(pos, "expected ')'");
      ++pos;
    }
    if (counts.size() + static_cast<std::size_t>(repeat) > 1'000'000) fail(start, "more than 1000000 nodes");
    counts.insert(counts.end(), static_cast<std::size_t>(repeat), count);
    if (pos == text.size()) return counts;
    if (text[pos] != ',') fail(pos, fmt::format("unexpected '{}'", text[pos]));
    ++pos;
  }
}

std::vector<int> parse_gpu_ids(std::string_view text, std::string_view what) {
  auto fail = [&](std::size_t at, std::string_view why) {
    throw Error(
        fmt::format("{}: invalid GPU ids '{}': {} at column {}; valid forms: 0,1,2 or 0-3,6", what, text, why, at + 1));
  };
  std::vector<int> ids;
  if (text.empty()) return ids;
  std::size_t pos = 0;
  while (true) {
    std::size_t start = pos;
    int lo = read_int(text, pos);
    if (lo < 0) fail(start, "expected a GPU index");
    int hi = lo;
    if (pos < text.size() && text[pos] == '-') {
      std::size_t hi_at = ++pos;
      hi = read_int(text, pos);
      if (hi < 0) fail(hi_at, "expected a GPU index");
      if (hi < lo) fail(start, fmt::format("range {}-{} runs backwards", lo, hi));
      if (hi - lo > 65536) fail(start, "range too large");
    }
    for (int id = lo; id <= hi; ++id) ids.push_back(id);
    if (pos == text.size()) return ids;
    if (text[pos] != ',') fail(pos, fmt::format("unexpected '{}'", text[pos]));
    ++pos;
  }
}

}  // namespace sgpu::launcher::slurm
