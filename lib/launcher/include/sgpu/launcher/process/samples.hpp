#pragma once
// What a node's sampler saw of its ranks and GPUs at one moment (--sample-every):
// the supervisor's observers get it as an event, like output, wherever the
// node runs (metrics/ takes the samples; outputs/ keeps and shows them).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sgpu::launcher {

struct RankSample {
  int rank = 0;
  int pid = 0;
  std::optional<double> cpu_percent;  // of one core, since the previous sample (none on the first)
  std::uint64_t rss_bytes = 0;
  int threads = 0;
  char state = '?';                      // /proc's: R, S, D, T, Z...
  std::optional<std::int64_t> step;      // the newest step its heartbeat named
  std::optional<double> step_rate;       // steps per second since the previous sample that had a step
  std::optional<double> progress_age_s;  // seconds since its heartbeat was last touched
};

struct GpuSample {
  int index = 0;  // the node's CUDA index (PCI order)
  std::string uuid;
  std::optional<unsigned> utilization_percent;         // SM busy
  std::optional<unsigned> memory_utilization_percent;  // memory controller busy
  std::optional<std::uint64_t> memory_used_bytes;
  std::optional<std::uint64_t> memory_total_bytes;
  std::optional<double> power_watts;
  std::optional<double> power_limit_watts;
  std::optional<unsigned> temperature_c;
  std::optional<unsigned> sm_clock_mhz;
  std::optional<std::uint64_t> throttle_reasons;    // NVML's clocks event reasons bit mask
  std::optional<std::uint64_t> ranks_memory_bytes;  // what the job's ranks hold on it (NVML's processes)
  std::vector<int> ranks;                           // the job's ranks meant to use it
};

struct NodeSample {
  std::chrono::system_clock::time_point time{};
  int node = 0;
  std::string host;
  std::vector<RankSample> ranks;
  std::vector<GpuSample> gpus;
};

}  // namespace sgpu::launcher
