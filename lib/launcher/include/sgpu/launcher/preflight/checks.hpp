#pragma once
// The pure half of `sgpu doctor` and `--preflight`: the all-reduce's sizes,
// values and bandwidths (as nccl-tests' all_reduce_perf defines them), the
// bandwidth expected of each GPU type, and the pass/warn/fail rules for a GPU,
// a link and the all-reduce. No I/O; health.hpp and preflight.hpp gather the
// facts these functions judge.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sgpu::launcher::preflight {

enum class Verdict { pass, warn, fail };
std::string_view verdict_name(Verdict v);  // "pass", "warn", "fail"
Verdict worst(Verdict a, Verdict b);

// Message sizes from `min_bytes` to `max_bytes`, each `factor` times the one
// before (nccl-tests' -b/-e/-f), rounded down to whole floats (4 bytes).
// Throws sgpu::Error (usage) for min < 4, min > max, factor < 2.
std::vector<std::uint64_t> allreduce_sizes(std::uint64_t min_bytes, std::uint64_t max_bytes, int factor);

// "8", "64K", "1M", "1G" (powers of 1024, as nccl-tests' -b/-e) -> bytes.
// Throws sgpu::Error naming `what` (the flag) otherwise.
std::uint64_t parse_bytes(std::string_view text, std::string_view what);

// What rank `rank` puts in element `i`, and what every rank must read back
// after a sum over `nranks`: small integers, exact in float32.
float fill_value(int rank, std::uint64_t i);
float expected_sum(int nranks, std::uint64_t i);

// The same over whole buffers, at memcpy and memcmp speed: a 1 GiB check
// element by element costs seconds of the preflight's CPU. fill_values writes
// fill_value(rank, i) into out[i]; count_wrong counts the elements of `got`
// that are not expected_sum(nranks, i) and puts the first one's index in
// *first_wrong (untouched when there is none).
void fill_values(int rank, float* out, std::uint64_t count);
std::uint64_t count_wrong(int nranks, const float* got, std::uint64_t count, std::uint64_t* first_wrong);

// nccl-tests' all_reduce_perf: algbw = bytes / time, busbw = algbw * 2(n-1)/n,
// in GB/s (1e9 bytes). The time is the average over ranks (its default -a 1).
struct Bandwidth {
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
};
Bandwidth bandwidth(std::uint64_t bytes, const std::vector<double>& rank_times_us);

// The bus bandwidth a healthy node of one GPU type reaches in a large
// all-reduce across its GPUs, and where that number comes from.
struct Expectation {
  std::string type;           // normalised GPU type, "H100"
  std::string name_contains;  // narrows the entry ("PCIe"); empty: any
  double busbw_gbps = 0;
  std::string source;
};
const std::vector<Expectation>& expectation_table();
// The entry for a GPU (most specific first), or the override when given
// (source "--expect-busbw"), or nothing for a type sgpu has no number for.
std::optional<Expectation> expectation_for(std::string_view type, std::string_view name,
                                           std::optional<double> override_gbps);

// busbw against the expectation: pass from 75 %, warn from 40 %, fail below.
struct Judgement {
  Verdict verdict = Verdict::pass;
  std::vector<std::string> reasons;  // why not pass, or notes
};
Judgement judge_bandwidth(double busbw_gbps, int nranks, const std::optional<Expectation>& expected);

// One GPU as NVML reports it; unset optionals were not supported.
struct GpuHealth {
  int index = 0;
  std::string name, type, uuid, pci_bus_id;
  std::uint64_t memory_total = 0, memory_used = 0;
  std::vector<unsigned> pids;  // compute processes already on the GPU
  std::optional<std::uint64_t> ecc_volatile_uncorrected, ecc_aggregate_uncorrected, ecc_volatile_corrected;
  std::optional<bool> retired_pages_pending, remapped_rows_pending, remap_failed;
  std::optional<unsigned long long> throttle_reasons;  // NVML clocks-event reason bits
  std::optional<unsigned> temperature_c;
  std::optional<bool> persistence_mode, mig_enabled;
  std::optional<int> compute_mode;  // 0 default, 1 exclusive thread, 2 prohibited, 3 exclusive process
  int nvlinks_active = 0, nvlinks_inactive = 0;
  bool read = true;   // false: NVML could not be read, nothing above but the names is known
  bool found = true;  // false: NVML runs but does not know its PCI bus id (it fell off the bus)
  std::string node;   // across nodes: the node's name; "" on one node
};
Judgement judge_gpu(const GpuHealth& gpu);
// The health gate's verdict on a GPU before an attempt starts on it (no rank
// of the job runs then): why it may not be used, "" when it may. What
// judge_gpu fails, a GPU NVML no longer finds, and a process on it. A GPU
// whose health could not be read passes (the gate says so once).
std::string gate_reason(const GpuHealth& gpu);
// What an XID (NVML's critical-error event, the driver's Xid) says of the
// GPU's hardware, from NVIDIA's XID catalogue: "fell off the bus" for 79,
// "a double-bit ECC error" for 48... The gate leaves a GPU that reported one
// out of the next attempt. "" for the XIDs a program causes or the driver
// recovers from (13, 31, 43, 45, 94...), which leave the GPU in.
std::string xid_fault(unsigned long long xid);
// "hw_slowdown, sw_thermal" for the reason bits that slow a GPU; idle and
// application clocks settings are left out.
std::string throttle_text(unsigned long long reasons);

// Two GPUs as `nvidia-smi topo -m` shows them.
struct LinkHealth {
  int a = 0, b = 0;                // GPU indices
  std::string path;                // "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "?"
  std::optional<bool> p2p_read;    // peer-to-peer reads possible
  std::optional<bool> p2p_nvlink;  // connected by NVLink
  std::string node;                // across nodes: the node's name; "" on one node
};
Judgement judge_link(const LinkHealth& link, int a_nvlinks, int b_nvlinks);
// NVML's nvmlGpuTopologyLevel_t as nvidia-smi writes it.
std::string topology_path(int nvml_level);

}  // namespace sgpu::launcher::preflight
