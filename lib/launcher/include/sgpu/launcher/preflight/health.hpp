#pragma once
// Health and topology of a job's GPUs from NVML (libnvidia-ml.so.1, loaded at
// run time): ECC, pending retirements, clocks, temperature, modes, processes,
// NVLinks, and the P2P matrix between them, as facts for checks.hpp to judge.
#include <memory>
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

// NVML's critical-error events (XIDs) of some GPUs, from the moment it is
// made: before a restart the gate asks which GPUs reported one during the
// attempt that ended (xid_fault judges them). It keeps NVML initialized
// while it lives. Without NVML, or a driver without the event API, it
// watches nothing (`watching()` is false).
class XidWatch {
 public:
  explicit XidWatch(const std::vector<env::Gpu>& gpus);
  ~XidWatch();
  XidWatch(const XidWatch&) = delete;
  XidWatch& operator=(const XidWatch&) = delete;

  bool watching() const;
  struct Event {
    int gpu = -1;  // sgpu's index
    unsigned long long xid = 0;
  };
  // The events since the last call, in order. Never waits.
  std::vector<Event> drain();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgpu::launcher::preflight
