#pragma once
// The job's GPUs through NVML (libnvidia-ml.so.1, loaded with dlopen on the
// first sample): utilisation, memory, power, temperature, SM clock, clock
// event (throttle) reasons, and the memory the job's ranks hold on each.
// A GPU or a fact NVML cannot give is left out, never an error.
#include <memory>
#include <string>
#include <vector>

#include "sgpu/launcher/metrics/sampler.hpp"
#include "sgpu/launcher/process/samples.hpp"

namespace sgpu::launcher::metrics {

class GpuSampler {
 public:
  explicit GpuSampler(std::vector<SampledGpu> gpus);
  ~GpuSampler();
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;

  // One sample of every GPU NVML found; `pids` are the ranks' (pid, rank),
  // whose GPU memory each GPU's sample adds up. Empty when NVML is missing.
  std::vector<GpuSample> sample(const std::vector<std::pair<int, int>>& pids);
  // Why there are no GPU samples ("" while there are, or none were asked for).
  const std::string& unavailable() const { return unavailable_; }

 private:
  struct Nvml;
  std::vector<SampledGpu> gpus_;
  std::unique_ptr<Nvml> nvml_;
  std::vector<void*> handles_;  // by gpus_ entry; nullptr: not found
  bool opened_ = false;
  std::string unavailable_;
  void open();
};

}  // namespace sgpu::launcher::metrics
