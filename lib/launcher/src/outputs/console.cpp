#include "sgpu/launcher/outputs/console.hpp"

#include <charconv>
#include <chrono>
#include <ctime>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/outputs/signal_before.hpp"

namespace sgpu::launcher {

namespace {
// Cyan, yellow, green, magenta, blue and their bright forms: no red, which reads as an error.
constexpr std::array<int, 10> kRankColors = {36, 33, 32, 35, 34, 96, 93, 92, 95, 94};

// " 12:00:01.234": local time, for people reading the console.
void format_timestamp(std::string& out) {
  auto now = std::chrono::system_clock::now();
  auto t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::localtime_r(&t, &tm);
  out = fmt::format("{:02d}:{:02d}:{:02d}.{:03d} ", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}
}  // namespace

void append_console_segment(std::string& out, std::string_view lead, std::string_view segment, bool at_end) {
  out.append(lead);
  out.append(segment);
  // A piece of an over-long line, a last line without "\n", or a last
  // progress redraw ("\r"): end it, so the next rank's line starts on its own.
  char last = segment.empty() ? '\0' : segment.back();
  if (last != '\n' && (last != '\r' || at_end)) out.push_back('\n');
}

std::string rank_prefix(std::string_view label, int rank, bool color) {
  if (!color) return fmt::format("[{}] ", label);
  auto code = kRankColors[static_cast<std::size_t>(rank) % kRankColors.size()];
  return fmt::format("\x1b[{}m[{}]\x1b[0m ", code, label);
}

ConsolePrinter::ConsolePrinter(ConsoleSink& sink, ConsoleOptions options) : sink_(sink), options_(std::move(options)) {
  if (options_.raw_rank) options_.ranks = {*options_.raw_rank};
  if (options_.ranks.empty()) return;  // all shown
  shown_.assign(options_.labels.size(), false);
  for (int r : options_.ranks)
    if (r >= 0 && static_cast<std::size_t>(r) < shown_.size()) shown_[static_cast<std::size_t>(r)] = true;
}

bool ConsolePrinter::shown(int rank) const {
  if (shown_.empty()) return true;
  return rank >= 0 && static_cast<std::size_t>(rank) < shown_.size() && shown_[static_cast<std::size_t>(rank)];
}

const std::string& ConsolePrinter::prefix(int rank, Stream stream) {
  auto [it, inserted] = prefixes_.try_emplace({rank, stream});
  if (inserted) {
    auto idx = static_cast<std::size_t>(rank);
    std::string label = idx < options_.labels.size() ? options_.labels[idx] : std::to_string(rank);
    it->second = rank_prefix(label, rank, options_.color[stream == Stream::Out ? 0 : 1]);
  }
  return it->second;
}

std::string_view ConsolePrinter::lead(int rank, Stream stream) {
  const auto& p = prefix(rank, stream);
  if (!options_.timestamps) return p;
  format_timestamp(lead_);
  lead_.insert(0, p);
  return lead_;
}

void ConsolePrinter::on_rank_output(int rank, Stream stream, std::string_view bytes, const BytesOwner& owner) {
  if (!shown(rank)) return;
  if (options_.raw_rank) {
    sink_.write(stream, bytes);  // bytes as they come: progress bars, curses, tools that want a terminal
    return;
  }
  auto& splitter = splitters_[{rank, stream}];
  if (!splitter) splitter = std::make_shared<LineSplitter>();
  if (sink_.renders(stream)) {
    // A file: the lines are made on its thread, from the bytes as read.
    sink_.render(stream, bytes, owner,
                 [splitter, lead = std::string(lead(rank, stream))](std::string_view in, std::string& out) {
                   splitter->feed(in, [&](std::string_view s) { append_console_segment(out, lead, s, false); });
                 });
    return;
  }
  out_.clear();
  auto l = lead(rank, stream);
  splitter->feed(bytes, [&](std::string_view s) { append_console_segment(out_, l, s, false); });
  // One write per chunk of whole segments: another rank's line can never land inside.
  sink_.write(stream, out_);
}

void ConsolePrinter::on_rank_output_closed(int rank, Stream stream) {
  auto it = splitters_.find({rank, stream});
  if (it == splitters_.end()) return;
  if (sink_.renders(stream)) {
    sink_.render(stream, {}, nullptr,
                 [splitter = it->second, lead = std::string(lead(rank, stream))](std::string_view, std::string& out) {
                   if (splitter->has_partial()) append_console_segment(out, lead, splitter->finish(), true);
                 });
    return;
  }
  if (!it->second->has_partial()) return;
  out_.clear();
  append_console_segment(out_, lead(rank, stream), it->second->finish(), true);
  sink_.write(stream, out_);
}

std::string restart_line(int attempt, int max_restarts, const env::JobEnd& cause, env::Seconds backoff) {
  return fmt::format("sgpu: attempt {} ended: {}; restart {} of {} in {}\n", attempt - 1,
                     env::describe_end_and_code(cause), attempt, max_restarts, env::format_duration(backoff));
}

void ConsolePrinter::on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) {
  sink_.write(Stream::Err, restart_line(attempt, options_.max_restarts, cause, backoff));
}

void ConsolePrinter::on_excluded(const Exclusion& e) {
  if (e.gpu < 0) {  // a whole node (--spares): the line that replaced it was said already
    sink_.write(Stream::Err, fmt::format("sgpu: warning: node {} is left out for the rest of the run (attempt {} on): "
                                         "{}\n",
                                         e.host, e.attempt, e.reason));
    return;
  }
  sink_.write(Stream::Err, fmt::format("sgpu: warning: {}GPU {} fails the health gate: {}; left out for the rest of "
                                       "the run (attempt {} on)\n",
                                       e.host.empty() ? "" : e.host + " ", e.gpu, e.reason, e.attempt));
}

void ConsolePrinter::on_nodes_placed(const std::vector<NodePlacement>& nodes) {
  for (const auto& n : nodes)
    for (int r = n.first_rank; r < n.first_rank + n.ranks; ++r)
      if (r >= 0 && static_cast<std::size_t>(r) < options_.labels.size())
        options_.labels[static_cast<std::size_t>(r)] = fmt::format("{}:{}", n.host, r);
  prefixes_.clear();  // made again from the labels as each rank next writes
}

void ConsolePrinter::on_rank_exited(int /*rank*/, const env::ExitStatus& /*status*/, bool /*terminated_by_sgpu*/) {
  if (++exited_ >= options_.labels.size()) sink_.release();
}

void ConsolePrinter::on_teardown(const env::JobEnd& /*cause*/) { sink_.release(); }

void ConsolePrinter::on_signal_before(const env::SignalBefore& signal, Clock::time_point deadline, bool sent) {
  sink_.write(Stream::Err, signal_before_line({signal, deadline, sent ? std::optional(Clock::now()) : std::nullopt}));
}

}  // namespace sgpu::launcher
