#include "sgpu/launcher/preflight/checks.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher::preflight {

std::string_view verdict_name(Verdict v) {
  switch (v) {
    case Verdict::pass:
      return "pass";
    case Verdict::warn:
      return "warn";
    case Verdict::fail:
      return "fail";
  }
  return "fail";
}

Verdict worst(Verdict a, Verdict b) { return static_cast<int>(a) > static_cast<int>(b) ? a : b; }

std::vector<std::uint64_t> allreduce_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes, int factor) {
  if (min_bytes < 4)
    throw Error(fmt::format("--min-bytes {}: the smallest all-reduce is one float (4 bytes)", min_bytes));
  if (min_bytes > max_bytes) throw Error(fmt::format("--min-bytes {} is above --max-bytes {}", min_bytes, max_bytes));
  if (factor < 2) throw Error(fmt::format("--step-factor {}: each size must grow, 2 or more", factor));
  std::vector<std::uint64_t> sizes;
  for (std::uint64_t b = min_bytes; b <= max_bytes; b *= static_cast<std::uint64_t>(factor)) {
    sizes.push_back(b / 4 * 4);
    if (b > max_bytes / static_cast<std::uint64_t>(factor)) break;
  }
  return sizes;
}

std::uint64_t parse_bytes(std::string_view text, std::string_view what) {
  auto bad = [&] {
    return Error(fmt::format("{} {}: not a size; write bytes as 8, 64K, 1M or 1G (powers of 1024)", what, text));
  };
  if (text.empty()) throw bad();
  std::uint64_t unit = 1;
  switch (std::toupper(static_cast<unsigned char>(text.back()))) {
    case 'K':
      unit = 1ULL << 10;
      break;
    case 'M':
      unit = 1ULL << 20;
      break;
    case 'G':
      unit = 1ULL << 30;
      break;
    default:
      break;
  }
  auto digits = unit == 1 ? text : text.substr(0, text.size() - 1);
  if (digits.empty() || digits.size() > 12) throw bad();
  std::uint64_t n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') throw bad();
    n = n * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return n * unit;
}

float fill_value(int rank, std::uint64_t i) { return static_cast<float>(rank + 1 + static_cast<int>(i % 7)); }

float expected_sum(int nranks, std::uint64_t i) {
  return static_cast<float>(nranks * (nranks + 1) / 2 + nranks * static_cast<int>(i % 7));
}

namespace {

// Both patterns repeat every 7 elements; a block of whole periods, a few
// pages long, is what gets copied and compared.
constexpr std::uint64_t kBlock = 7 * 1024;

template <typename Value>
std::vector<float> pattern_block(Value value) {
  std::vector<float> block(kBlock);
  for (std::uint64_t i = 0; i < kBlock; ++i) block[i] = value(i);
  return block;
}

}  // namespace

void fill_values(int rank, float* out, std::uint64_t count) {
  auto block = pattern_block([rank](std::uint64_t i) { return fill_value(rank, i); });
  for (std::uint64_t at = 0; at < count; at += kBlock)
    std::memcpy(out + at, block.data(), std::min(kBlock, count - at) * sizeof(float));
}

std::uint64_t count_wrong(int nranks, const float* got, std::uint64_t count, std::uint64_t* first_wrong) {
  auto block = pattern_block([nranks](std::uint64_t i) { return expected_sum(nranks, i); });
  std::uint64_t wrong = 0;
  for (std::uint64_t at = 0; at < count; at += kBlock) {
    std::uint64_t n = std::min(kBlock, count - at);
    // Equal bits are equal values here: the sums are small positive integers.
    if (std::memcmp(got + at, block.data(), n * sizeof(float)) == 0) continue;
    for (std::uint64_t i = 0; i < n; ++i) {
      if (got[at + i] == block[i]) continue;
      if (wrong++ == 0 && first_wrong) *first_wrong = at + i;
    }
  }
  return wrong;
}

Bandwidth bandwidth(std::uint64_t bytes, const std::vector<double>& rank_times_us) {
  Bandwidth bw;
  if (rank_times_us.empty()) return bw;
  bw.time_us =
      std::accumulate(rank_times_us.begin(), rank_times_us.end(), 0.0) / static_cast<double>(rank_times_us.size());
  if (bw.time_us <= 0) return bw;
  auto n = static_cast<double>(rank_times_us.size());
  bw.algbw_gbps = static_cast<double>(bytes) / 1e3 / bw.time_us;  // bytes/us = 1e6 B/s; /1e3 -> GB/s
  bw.busbw_gbps = bw.algbw_gbps * 2 * (n - 1) / n;
  return bw;
}

const std::vector<Expectation>& expectation_table() {
  // All-reduce bus bandwidth is bounded by one direction of a GPU's link; the
  // expectation is 80 % of it, from each product's datasheet. Calibrate with
  // --expect-busbw where a node measures differently.
  static const std::vector<Expectation> table = {
      {"B200", "", 720, "NVIDIA B200 datasheet: NVLink 5 1.8 TB/s (900 GB/s each way); 80 % of one way"},
      {"GB200", "", 720, "NVIDIA GB200 NVL72 datasheet: NVLink 5 1.8 TB/s per GPU (900 GB/s each way); 80 %"},
      {"H200", "", 360, "NVIDIA H200 SXM datasheet: NVLink 900 GB/s (450 GB/s each way); 80 % of one way"},
      {"H100", "PCIe", 51, "NVIDIA H100 PCIe datasheet: PCIe Gen5 x16 128 GB/s (64 GB/s each way); 80 %"},
      {"H100", "", 360, "NVIDIA H100 SXM datasheet: NVLink 900 GB/s (450 GB/s each way); 80 % of one way"},
      {"A100", "PCIe", 25.6, "NVIDIA A100 PCIe datasheet: PCIe Gen4 x16 64 GB/s (32 GB/s each way); 80 %"},
      {"A100", "", 240, "NVIDIA A100 SXM4 datasheet: NVLink 600 GB/s (300 GB/s each way); 80 % of one way"},
      {"V100", "", 120, "NVIDIA V100 SXM2 datasheet: NVLink 300 GB/s (150 GB/s each way); 80 % of one way"},
      {"L40S", "", 25.6, "NVIDIA L40S datasheet: PCIe Gen4 x16 64 GB/s (32 GB/s each way); 80 %"},
      {"L4", "", 25.6, "NVIDIA L4 datasheet: PCIe Gen4 x16 64 GB/s (32 GB/s each way); 80 %"},
      {"A10G", "", 25.6, "AWS G5 (A10G): PCIe Gen4 x16, 32 GB/s each way; 80 %"},
      {"T4", "", 12.8, "NVIDIA T4 datasheet: PCIe Gen3 x16 32 GB/s (16 GB/s each way); 80 %"},
  };
  return table;
}

namespace {
bool contains_ci(std::string_view text, std::string_view part) {
  auto it = std::search(text.begin(), text.end(), part.begin(), part.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
  return it != text.end();
}
}  // namespace

std::optional<Expectation> expectation_for(std::string_view type, std::string_view name,
                                           std::optional<double> override_gbps) {
  if (override_gbps) return Expectation{std::string(type), "", *override_gbps, "--expect-busbw"};
  for (const auto& e : expectation_table()) {
    if (e.type == type && (e.name_contains.empty() || contains_ci(name, e.name_contains))) return e;
  }
  return std::nullopt;
}

Judgement judge_bandwidth(double busbw_gbps, int nranks, const std::optional<Expectation>& expected) {
  Judgement j;
  if (nranks < 2) {
    j.reasons.push_back("one GPU: no bus traffic (busbw is 0 by definition); the result values were checked");
    return j;
  }
  if (!expected) {
    j.reasons.push_back("no expected bandwidth for this GPU type; give one with --expect-busbw");
    return j;
  }
  if (expected->busbw_gbps <= 0) return j;
  double ratio = busbw_gbps / expected->busbw_gbps;
  auto text = fmt::format("busbw {:.3g} GB/s is {:.0f}% of the {:.3g} GB/s expected ({})", busbw_gbps, ratio * 100,
                          expected->busbw_gbps, expected->source);
  if (ratio < 0.4)
    j.verdict = Verdict::fail;
  else if (ratio < 0.75)
    j.verdict = Verdict::warn;
  if (j.verdict != Verdict::pass) j.reasons.push_back(text);
  return j;
}

std::string throttle_text(unsigned long long reasons) {
  static const std::pair<unsigned long long, const char*> names[] = {
      {0x4, "sw_power_cap"}, {0x8, "hw_slowdown"},     {0x20, "sw_thermal"},
      {0x40, "hw_thermal"},  {0x80, "hw_power_brake"}, {0x10, "sync_boost"},
  };
  std::string out;
  for (const auto& [bit, name] : names) {
    if ((reasons & bit) != 0) out += (out.empty() ? "" : ", ") + std::string(name);
  }
  return out;
}

Judgement judge_gpu(const GpuHealth& g) {
  Judgement j;
  auto fail = [&](std::string why) {
    j.verdict = Verdict::fail;
    j.reasons.push_back(std::move(why));
  };
  auto warn = [&](std::string why) {
    j.verdict = worst(j.verdict, Verdict::warn);
    j.reasons.push_back(std::move(why));
  };
  if (!g.read) {
    warn("health not read (no NVML)");
    return j;
  }
  if (g.ecc_volatile_uncorrected.value_or(0) > 0)
    fail(fmt::format("{} uncorrectable ECC errors since the driver loaded", *g.ecc_volatile_uncorrected));
  if (g.remap_failed.value_or(false)) fail("a row remapping failed: the GPU needs service");
  if (g.remapped_rows_pending.value_or(false)) fail("remapped rows pending: the GPU needs a reset");
  if (g.retired_pages_pending.value_or(false)) fail("retired pages pending: the GPU needs a reset");
  if (g.compute_mode.value_or(0) == 2) fail("compute mode is Prohibited: no process can use it");
  bool exclusive = g.compute_mode.value_or(0) == 1 || g.compute_mode.value_or(0) == 3;
  std::string pids;
  for (auto p : g.pids) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
  if (!g.pids.empty() && exclusive)
    fail(fmt::format("compute mode is exclusive and process {} holds it", pids));
  else if (!g.pids.empty())
    warn(fmt::format("{} process(es) already on it (pid {})", g.pids.size(), pids));
  if (g.ecc_aggregate_uncorrected.value_or(0) > 0)
    warn(fmt::format("{} uncorrectable ECC errors in its lifetime", *g.ecc_aggregate_uncorrected));
  if (g.mig_enabled.value_or(false)) warn("MIG is on: NCCL cannot span MIG instances of separate processes");
  constexpr unsigned long long kSlowing = 0x8 | 0x20 | 0x40 | 0x80;
  if (g.throttle_reasons && (*g.throttle_reasons & kSlowing) != 0)
    warn("clocks slowed: " + throttle_text(*g.throttle_reasons & kSlowing));
  if (g.temperature_c.value_or(0) >= 85) warn(fmt::format("temperature {} C", *g.temperature_c));
  if (g.nvlinks_active > 0 && g.nvlinks_inactive > 0)
    warn(fmt::format("{} of {} NVLinks down", g.nvlinks_inactive, g.nvlinks_active + g.nvlinks_inactive));
  return j;
}

std::string xid_fault(unsigned long long xid) {
  struct Fault {
    unsigned long long xid;
    const char* what;
  };
  static constexpr Fault faults[] = {
      {48, "a double-bit ECC error"},
      {62, "an internal micro-controller halt"},
      {64, "a failed row remap"},
      {74, "an NVLink error"},
      {79, "the GPU fell off the bus"},
      {92, "a high single-bit ECC error rate"},
      {95, "an uncontained ECC error"},
      {119, "a GSP RPC timeout"},
      {120, "a GSP error"},
      {140, "an unrecovered ECC error"},
  };
  for (const auto& f : faults)
    if (f.xid == xid) return f.what;
  return "";
}

std::string gate_reason(const GpuHealth& g) {
  if (!g.read) return "";
  if (!g.found) return "NVML no longer finds it at its PCI bus id (it fell off the bus)";
  auto judged = judge_gpu(g);
  if (judged.verdict == Verdict::fail) {
    std::string why;
    for (const auto& r : judged.reasons) why += (why.empty() ? "" : "; ") + r;
    return why;
  }
  if (!g.pids.empty()) {
    std::string pids;
    for (auto p : g.pids) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
    return fmt::format("in use by process {}, which is not the job's", pids);
  }
  return "";
}

std::string topology_path(int nvml_level) {
  switch (nvml_level) {
    case 0:
      return "X";
    case 10:
      return "PIX";
    case 20:
      return "PXB";
    case 30:
      return "PHB";
    case 40:
      return "NODE";
    case 50:
      return "SYS";
    default:
      return "?";
  }
}

Judgement judge_link(const LinkHealth& link, int a_nvlinks, int b_nvlinks) {
  Judgement j;
  if (link.p2p_read == false) {
    j.verdict = Verdict::warn;
    j.reasons.push_back(
        fmt::format("no peer-to-peer between GPU {} and GPU {}: NCCL copies through host memory", link.a, link.b));
  }
  if (a_nvlinks > 0 && b_nvlinks > 0 && link.p2p_nvlink == false) {
    j.verdict = Verdict::warn;
    j.reasons.push_back(fmt::format("GPU {} and GPU {} both have NVLinks up but not to each other", link.a, link.b));
  }
  return j;
}

}  // namespace sgpu::launcher::preflight
