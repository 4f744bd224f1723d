// NVML's sampling queries. nvml.h is often not installed, so, as in
// devices/nvml.cpp, the entry points are declared with NVML's documented,
// stable ABI; an entry point a driver lacks leaves its fact unset.
#include "metrics/gpu_sampler.hpp"

#include <algorithm>
#include <array>
#include <optional>

#include "devices/shared_library.hpp"

namespace sgpu::launcher::metrics {
namespace {
using Ret = int;  // nvmlReturn_t
constexpr Ret kOk = 0;
constexpr Ret kInsufficientSize = 7;
using Dev = void*;    // nvmlDevice_t
struct Utilization {  // nvmlUtilization_t
  unsigned gpu, memory;
};
struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct ProcessInfo {  // nvmlProcessInfo_v2_t (nvmlDeviceGetComputeRunningProcesses_v3)
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id, compute_instance_id;
};
static_assert(sizeof(ProcessInfo) == 24);
constexpr int kTemperatureGpu = 0;                   // NVML_TEMPERATURE_GPU
constexpr int kClockSm = 1;                          // NVML_CLOCK_SM
constexpr unsigned long long kNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE in a process's memory
constexpr unsigned kMaxProcesses = 256;

template <class T, class F, class... A>
std::optional<T> ask(F f, A... args) {
  T value{};
  if (f == nullptr || f(args..., &value) != kOk) return std::nullopt;
  return value;
}
}  // namespace

struct GpuSampler::Nvml {
  SharedLibrary lib{"libnvidia-ml.so.1"};
  template <class F>
  F fn(const char* name) {
    return lib.function<F>(name);
  }
  Ret (*init)() = fn<Ret (*)()>("nvmlInit_v2");
  Ret (*shutdown)() = fn<Ret (*)()>("nvmlShutdown");
  Ret (*by_bus)(const char*, Dev*) = fn<Ret (*)(const char*, Dev*)>("nvmlDeviceGetHandleByPciBusId_v2");
  Ret (*by_index)(unsigned, Dev*) = fn<Ret (*)(unsigned, Dev*)>("nvmlDeviceGetHandleByIndex_v2");
  Ret (*utilization)(Dev, Utilization*) = fn<Ret (*)(Dev, Utilization*)>("nvmlDeviceGetUtilizationRates");
  Ret (*memory)(Dev, Memory*) = fn<Ret (*)(Dev, Memory*)>("nvmlDeviceGetMemoryInfo");
  Ret (*power)(Dev, unsigned*) = fn<Ret (*)(Dev, unsigned*)>("nvmlDeviceGetPowerUsage");
  Ret (*power_limit)(Dev, unsigned*) = fn<Ret (*)(Dev, unsigned*)>("nvmlDeviceGetEnforcedPowerLimit");
  Ret (*temperature)(Dev, int, unsigned*) = fn<Ret (*)(Dev, int, unsigned*)>("nvmlDeviceGetTemperature");
  Ret (*clock)(Dev, int, unsigned*) = fn<Ret (*)(Dev, int, unsigned*)>("nvmlDeviceGetClockInfo");
  Ret (*clock_events)(Dev, unsigned long long*) =
      fn<Ret (*)(Dev, unsigned long long*)>("nvmlDeviceGetCurrentClocksEventReasons");
  Ret (*throttle)(Dev, unsigned long long*) =
      fn<Ret (*)(Dev, unsigned long long*)>("nvmlDeviceGetCurrentClocksThrottleReasons");
  Ret (*processes)(Dev, unsigned*,
                   ProcessInfo*) = fn<Ret (*)(Dev, unsigned*, ProcessInfo*)>("nvmlDeviceGetComputeRunningProcesses_v3");
  bool initialised = false;
  ~Nvml() {
    if (initialised && shutdown != nullptr) shutdown();
  }
};

GpuSampler::GpuSampler(std::vector<SampledGpu> gpus) : gpus_(std::move(gpus)) {}
GpuSampler::~GpuSampler() = default;

void GpuSampler::open() {
  opened_ = true;
  if (gpus_.empty()) return;
  nvml_ = std::make_unique<Nvml>();
  if (!nvml_->lib.loaded()) {
    unavailable_ = nvml_->lib.error();
    return;
  }
  if (nvml_->init == nullptr || nvml_->init() != kOk) {
    unavailable_ = "libnvidia-ml.so.1: nvmlInit failed";
    return;
  }
  nvml_->initialised = true;
  for (const auto& g : gpus_) {
    Dev d = nullptr;
    bool found = !g.pci_bus_id.empty() && nvml_->by_bus != nullptr && nvml_->by_bus(g.pci_bus_id.c_str(), &d) == kOk;
    if (!found && g.pci_bus_id.empty() && nvml_->by_index != nullptr)
      found = nvml_->by_index(static_cast<unsigned>(g.index), &d) == kOk;
    handles_.push_back(found ? d : nullptr);
  }
}

std::vector<GpuSample> GpuSampler::sample(const std::vector<std::pair<int, int>>& pids) {
  if (!opened_) open();
  std::vector<GpuSample> out;
  if (!nvml_ || !nvml_->initialised) return out;
  auto& n = *nvml_;
  for (std::size_t i = 0; i < gpus_.size(); ++i) {
    Dev d = handles_[i];
    if (d == nullptr) continue;
    GpuSample s;
    s.index = gpus_[i].index;
    s.uuid = gpus_[i].uuid;
    s.ranks = gpus_[i].ranks;
    if (auto u = ask<Utilization>(n.utilization, d)) {
      s.utilization_percent = u->gpu;
      s.memory_utilization_percent = u->memory;
    }
    if (auto m = ask<Memory>(n.memory, d)) {
      s.memory_used_bytes = m->used;
      s.memory_total_bytes = m->total;
    }
    if (auto mw = ask<unsigned>(n.power, d)) s.power_watts = *mw / 1000.0;
    if (auto mw = ask<unsigned>(n.power_limit, d)) s.power_limit_watts = *mw / 1000.0;
    if (auto t = ask<unsigned>(n.temperature, d, kTemperatureGpu)) s.temperature_c = *t;
    if (auto c = ask<unsigned>(n.clock, d, kClockSm)) s.sm_clock_mhz = *c;
    auto reasons = ask<unsigned long long>(n.clock_events, d);
    if (!reasons) reasons = ask<unsigned long long>(n.throttle, d);
    if (reasons) s.throttle_reasons = *reasons;
    if (n.processes != nullptr) {
      std::array<ProcessInfo, kMaxProcesses> infos{};
      unsigned count = kMaxProcesses;
      Ret r = n.processes(d, &count, infos.data());
      if (r == kOk || r == kInsufficientSize) {
        std::uint64_t held = 0;
        for (unsigned p = 0; p < std::min(count, kMaxProcesses); ++p) {
          bool ours = std::any_of(pids.begin(), pids.end(),
                                  [&](const auto& pr) { return pr.first == static_cast<int>(infos[p].pid); });
          if (ours && infos[p].used_gpu_memory != kNotAvailable) held += infos[p].used_gpu_memory;
        }
        s.ranks_memory_bytes = held;
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace sgpu::launcher::metrics
