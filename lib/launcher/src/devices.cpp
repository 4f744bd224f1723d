#include "sgpu/launcher/devices.hpp"

#include <optional>

namespace sgpu::launcher {

Discovery discover_gpus(const env::Environment& environment) {
  Discovery d;
  std::optional<std::string> cvd;
  if (auto it = environment.find("CUDA_VISIBLE_DEVICES"); it != environment.end()) cvd = it->second;
  if (auto it = environment.find("SGPU_FAKE_GPUS"); it != environment.end()) {
    d.source = "fake";
    d.gpus = env::apply_cuda_visible_devices(env::parse_fake_gpus(it->second), cvd);
    return d;
  }
  d.source = "none";
  d.note = "no NVIDIA driver found (libnvidia-ml.so.1 not loadable)";
  return d;
}

}  // namespace sgpu::launcher
