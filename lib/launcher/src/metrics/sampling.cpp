#include "sgpu/launcher/metrics/sampling.hpp"

#include <algorithm>
#include <charconv>

namespace sgpu::launcher::metrics {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

template <class T>
std::optional<T> number(std::string_view s) {
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<ProcStat> parse_proc_stat(std::string_view text) {
  auto close = text.rfind(')');
  if (close == std::string_view::npos || text.find('(') == std::string_view::npos) return std::nullopt;
  // Fields from the state on: state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
  // utime(14) stime(15) cutime cstime priority nice num_threads(20) itrealvalue starttime vsize rss(24)
  std::vector<std::string_view> fields;
  auto rest = text.substr(close + 1);
  while (!rest.empty() && fields.size() < 22) {
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\n')) rest.remove_prefix(1);
    if (rest.empty()) break;
    auto end = rest.find_first_of(" \n");
    fields.push_back(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end);
  }
  if (fields.size() < 22 || fields[0].size() != 1) return std::nullopt;
  auto utime = number<std::uint64_t>(fields[11]);
  auto stime = number<std::uint64_t>(fields[12]);
  auto threads = number<int>(fields[17]);
  auto rss = number<std::int64_t>(fields[21]);
  if (!utime || !stime || !threads || !rss) return std::nullopt;
  return ProcStat{fields[0][0], *utime + *stime, *threads, static_cast<std::uint64_t>(std::max<std::int64_t>(*rss, 0))};
}

bool has_own_figures(const ProcStat& stat) { return stat.state != 'Z' && stat.state != 'X' && stat.rss_pages > 0; }

std::optional<std::int64_t> parse_heartbeat_step(std::string_view tail, bool whole_file) {
  std::vector<std::string_view> pieces;
  for (std::size_t start = 0;;) {
    auto nl = tail.find('\n', start);
    pieces.push_back(tail.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start));
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  // The piece after the last newline is being written, unless it is all the file holds.
  if (!pieces.back().empty() && !(whole_file && pieces.size() == 1)) pieces.back() = {};
  // The first piece of a tail that is not the whole file may be cut.
  std::size_t first = whole_file ? 0 : 1;
  for (std::size_t i = pieces.size(); i > first; --i) {
    auto line = trim(pieces[i - 1]);
    if (line.empty()) continue;
    return number<std::int64_t>(line);
  }
  return std::nullopt;
}

double cpu_percent(std::uint64_t ticks_before, std::uint64_t ticks_now, double seconds, long ticks_per_second) {
  if (seconds <= 0 || ticks_per_second <= 0 || ticks_now < ticks_before) return 0;
  return 100.0 * static_cast<double>(ticks_now - ticks_before) / static_cast<double>(ticks_per_second) / seconds;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  auto mid = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), mid, values.end());
  if (values.size() % 2 == 1) return *mid;
  double upper = *mid;
  double lower = *std::max_element(values.begin(), mid);
  return (lower + upper) / 2;
}

std::vector<Straggler> StragglerDetector::update(const std::vector<std::pair<int, double>>& rates) {
  for (const auto& [rank, rate] : rates) {
    if (rank < 0) continue;
    auto r = static_cast<std::size_t>(rank);
    if (r >= rates_.size()) {
      rates_.resize(r + 1);
      slow_in_a_row_.resize(r + 1, 0);
    }
    rates_[r] = rate;
  }
  std::vector<Straggler> found;
  for (const auto& [rank, rate] : rates) {
    if (rank < 0) continue;
    std::vector<double> others;
    for (std::size_t o = 0; o < rates_.size(); ++o)
      if (static_cast<int>(o) != rank && rates_[o]) others.push_back(*rates_[o]);
    auto r = static_cast<std::size_t>(rank);
    if (others.empty()) {
      slow_in_a_row_[r] = 0;
      continue;
    }
    double m = median(others);
    bool slow = m > 0 && rate * rule_.factor < m;
    slow_in_a_row_[r] = slow ? slow_in_a_row_[r] + 1 : 0;
    if (slow && slow_in_a_row_[r] >= rule_.samples && reported_.insert(rank).second) found.push_back({rank, rate, m});
  }
  return found;
}

void StragglerDetector::reset() {
  rates_.clear();
  slow_in_a_row_.clear();
  reported_.clear();
}

}  // namespace sgpu::launcher::metrics
