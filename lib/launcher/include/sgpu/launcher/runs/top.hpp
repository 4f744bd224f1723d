#pragma once
// `sgpu top`: a running job at a glance, one row per rank (its node, its
// GPU's utilisation and memory, CPU, memory, step rate, seconds since its
// last output, its last line), read from the run directory like `sgpu
// status` (the newest samples of metrics.jsonl, the events, the ends of the
// logs), so a detached run and a run of many nodes are seen alike.
// read_top does the reading; render_top, the screen, is pure.
#include <optional>
#include <string>
#include <vector>

#include "sgpu/launcher/runs/registry.hpp"

namespace sgpu::launcher {

struct TopRow {
  int rank = 0;
  std::string host;
  std::string state;  // running, ok, failed, ...
  std::optional<int> gpu;
  std::optional<double> gpu_util;     // percent
  std::optional<double> gpu_mem_gib;  // the GPU's memory in use
  std::optional<double> cpu;          // percent of one core
  std::optional<double> rss_mib;
  std::optional<double> step_rate;
  std::optional<double> output_age_s;  // since its last byte of output
  std::string last_line;
  bool straggler = false;
};

struct TopView {
  std::string run_id;
  std::string state;
  std::string sampled_at;  // the newest sample's time, "" none
  std::vector<TopRow> rows;
};

TopView read_top(const RunInfo& run);

enum class TopSort { Rank, Cpu, Gpu, Rate, Memory, Output };
struct TopOptions {
  TopSort sort = TopSort::Rank;
  std::string filter;  // only ranks whose number, host, state or last line holds it
  bool stragglers_only = false;
};

// The screen's lines, each at most `width` columns; at most `height` lines
// (0: no limit). The header names the keys.
std::vector<std::string> render_top(const TopView& view, const TopOptions& options, int width, int height);

}  // namespace sgpu::launcher
