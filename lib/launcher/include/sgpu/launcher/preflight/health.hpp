#pragma once
// Health and topology of a job's GPUs from NVML (libnvidia-ml.so.1, loaded at
// run time): ECC, pending retirements, clocks, temperature, modes, processes,
// NVLinks, and the P2P matrix between them, as facts for checks.hpp to judge.
#include <string>
#include <vector>

#include "sgpu/env/gpu.hpp"
#include "sgpu/launcher/preflight/checks.hpp"

namespace sgpu::launcher::preflight {

struct HealthReport {
  bool ok = false;
  std::string error;              // why NVML could not be read
  std::vector<GpuHealth> gpus;    // in the order asked; without NVML, what `gpus` said (read = false)
  std::vector<LinkHealth> links;  // every pair, a < b
};

// Finds each GPU by its PCI bus id (sgpu's indices are PCI order, NVML's need
// not be). A GPU NVML cannot find gets only what `gpus` says.
HealthReport query_health(const std::vector<env::Gpu>& gpus);
// What sgpu knows of a GPU whose health was not read.
GpuHealth unread(const env::Gpu& gpu);

// The health gate (--health-gate): the GPUs an attempt is about to use, read
// through NVML and judged by gate_reason. `error`: NVML could not be read
// (nothing was judged).
struct GateFailure {
  int gpu = -1;
  std::string reason;
};
struct GateResult {
  std::string error;
  std::vector<GateFailure> failures;
};
GateResult health_gate(const std::vector<env::Gpu>& gpus);

}  // namespace sgpu::launcher::preflight
