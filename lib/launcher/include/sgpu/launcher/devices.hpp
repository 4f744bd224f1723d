#pragma once
// This node's GPUs. Real discovery goes through NVML (libnvidia-ml.so.1,
// loaded with dlopen) so one binary runs with or without a driver. Test hook:
// SGPU_FAKE_GPUS=8xH100 stands in for NVML (see README "Test hooks").
#include <string>
#include <vector>

#include "sgpu/env/gpu.hpp"
#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

struct Discovery {
  std::vector<env::Gpu> gpus;  // all GPUs, `visible` marked per CUDA_VISIBLE_DEVICES, visible first
  std::string source;          // "nvml", "fake", "none"
  std::string note;            // why the list is empty, for the user
};

Discovery discover_gpus(const env::Environment& environment);

}  // namespace sgpu::launcher
