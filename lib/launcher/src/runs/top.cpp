#include "sgpu/launcher/runs/top.hpp"

#include <sys/stat.h>
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "sgpu/launcher/io/run_files.hpp"

namespace sgpu::launcher {
namespace {
using json = nlohmann::ordered_json;
constexpr std::size_t kLastLineTail = 4096;

std::optional<double> number(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

// The newest of the rank's two logs: its last non-empty line and its age.
void read_last_output(const std::string& run_dir, TopRow& row) {
  std::optional<std::chrono::system_clock::time_point> newest;
  std::string newest_path;
  for (auto stream : {Stream::Out, Stream::Err}) {
    auto path = rank_log_path(run_dir, row.rank, stream);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || st.st_size == 0) continue;
    auto at = std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
        std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
    if (!newest || at > *newest) {
      newest = at;
      newest_path = path;
    }
  }
  if (!newest) return;
  row.output_age_s = std::max(0.0, std::chrono::duration<double>(std::chrono::system_clock::now() - *newest).count());
  auto tail = read_file(newest_path, kLastLineTail, true);
  if (!tail) return;
  std::string_view text(*tail);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
  auto nl = text.find_last_of("\n\r");
  auto line = nl == std::string_view::npos ? text : text.substr(nl + 1);
  // Control characters (colours, a progress bar's escapes) would move the cursor of the screen.
  for (char c : line)
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f) row.last_line += c;
}

std::string cell(const std::optional<double>& v, const char* format) {
  return v ? fmt::format(fmt::runtime(format), *v) : "-";
}

std::string cut(const std::string& s, int width) {
  if (width <= 0) return "";
  // Counted in bytes past ASCII: a line cut inside a UTF-8 character loses that character only.
  if (static_cast<int>(s.size()) <= width) return s;
  auto out = s.substr(0, static_cast<std::size_t>(width));
  while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0x80) out.pop_back();
  if (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xC0) == 0xC0) out.pop_back();
  return out;
}

bool matches(const TopRow& r, const std::string& filter) {
  if (filter.empty()) return true;
  return std::to_string(r.rank) == filter || r.host.find(filter) != std::string::npos ||
         r.state.find(filter) != std::string::npos || r.last_line.find(filter) != std::string::npos;
}

const char* sort_name(TopSort s) {
  switch (s) {
    case TopSort::Rank:
      return "rank";
    case TopSort::Cpu:
      return "cpu";
    case TopSort::Gpu:
      return "gpu";
    case TopSort::Rate:
      return "steps/s";
    case TopSort::Memory:
      return "rss";
    case TopSort::Output:
      return "last output";
  }
  return "rank";
}

}  // namespace

TopView read_top(const RunInfo& run) {
  TopView view;
  view.run_id = run.id;
  view.state = run_state_name(run.state);
  auto ranks = rank_table(run);
  auto samples = newest_samples(run);
  for (const auto& r : ranks) {
    TopRow row;
    row.rank = r.value("rank", 0);
    row.host = r["host"].is_string() ? r["host"].get<std::string>() : "";
    row.state = r["state"].is_string() ? r["state"].get<std::string>() : "";
    auto key = std::to_string(row.rank);
    if (samples["ranks"].contains(key)) {
      const auto& s = samples["ranks"][key];
      row.cpu = number(s, "cpu_percent");
      if (auto rss = number(s, "rss_bytes")) row.rss_mib = *rss / (1 << 20);
      row.step_rate = number(s, "step_rate");
      if (row.host.empty() && s["host"].is_string()) row.host = s["host"].get<std::string>();
      if (s["ts"].is_string() && s["ts"].get<std::string>() > view.sampled_at) view.sampled_at = s["ts"];
    }
    for (const auto& [gkey, g] : samples["gpus"].items()) {
      bool mine = g.contains("ranks") && g["ranks"].is_array() &&
                  std::find(g["ranks"].begin(), g["ranks"].end(), row.rank) != g["ranks"].end();
      if (!mine) continue;
      row.gpu = g.value("gpu", 0);
      row.gpu_util = number(g, "utilization_percent");
      if (auto used = number(g, "memory_used_bytes")) row.gpu_mem_gib = *used / (1 << 30);
      break;
    }
    for (const auto& s : samples["stragglers"]) row.straggler = row.straggler || s == row.rank;
    read_last_output(run.dir, row);
    view.rows.push_back(std::move(row));
  }
  return view;
}

std::vector<std::string> render_top(const TopView& view, const TopOptions& options, int width, int height) {
  std::vector<TopRow> rows;
  for (const auto& r : view.rows)
    if (matches(r, options.filter) && (!options.stragglers_only || r.straggler)) rows.push_back(r);
  auto key = [&](const TopRow& r) -> double {
    auto lowest = -std::numeric_limits<double>::infinity();
    switch (options.sort) {
      case TopSort::Rank:
        return -r.rank;
      case TopSort::Cpu:
        return r.cpu.value_or(lowest);
      case TopSort::Gpu:
        return r.gpu_util.value_or(lowest);
      case TopSort::Rate:  // the slowest first: what one looks for
        return r.step_rate ? -*r.step_rate : lowest;
      case TopSort::Memory:
        return r.rss_mib.value_or(lowest);
      case TopSort::Output:  // the longest silent first
        return r.output_age_s.value_or(lowest);
    }
    return 0;
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const TopRow& a, const TopRow& b) { return key(a) > key(b); });
  std::size_t stragglers = 0;
  for (const auto& r : view.rows) stragglers += r.straggler ? 1 : 0;
  std::vector<std::string> out;
  out.push_back(
      cut(fmt::format("sgpu top: run {} {}, {} rank{}{}{}", view.run_id, view.state, view.rows.size(),
                      view.rows.size() == 1 ? "" : "s",
                      stragglers > 0 ? fmt::format(", {} straggler{}", stragglers, stragglers == 1 ? "" : "s") : "",
                      view.sampled_at.empty() ? ", no sample yet" : ", sampled " + view.sampled_at),
          width));
  out.push_back(cut(fmt::format("sort: {} (r c g s m o)  filter: {} (/ to set, esc to clear)  x: stragglers only{}  q: "
                                "quit (the job runs on)",
                                sort_name(options.sort), options.filter.empty() ? "-" : options.filter,
                                options.stragglers_only ? " (on)" : ""),
                    width));
  out.push_back(cut(fmt::format("{:>5} {:<12} {:<9} {:>3} {:>5} {:>7} {:>6} {:>8} {:>8} {:>6}  {}", "rank", "node",
                                "state", "gpu", "gpu%", "gpu GiB", "cpu%", "rss MiB", "steps/s", "quiet", "last line"),
                    width));
  for (const auto& r : rows) {
    if (height > 0 && static_cast<int>(out.size()) >= height) break;
    auto line = fmt::format(
        "{:>4}{} {:<12} {:<9} {:>3} {:>5} {:>7} {:>6} {:>8} {:>8} {:>6}  {}", r.rank, r.straggler ? "*" : " ",
        cut(r.host, 12), cut(r.state, 9), r.gpu ? std::to_string(*r.gpu) : "-", cell(r.gpu_util, "{:.0f}"),
        cell(r.gpu_mem_gib, "{:.1f}"), cell(r.cpu, "{:.0f}"), cell(r.rss_mib, "{:.0f}"), cell(r.step_rate, "{:.2f}"),
        r.output_age_s ? fmt::format("{:.0f}s", *r.output_age_s) : "-", r.last_line);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out.push_back(cut(line, width));
  }
  if (rows.size() < view.rows.size() && (height == 0 || static_cast<int>(out.size()) < height))
    out.push_back(
        cut(fmt::format("({} of {} ranks shown; * marks a straggler)", rows.size(), view.rows.size()), width));
  return out;
}

}  // namespace sgpu::launcher
