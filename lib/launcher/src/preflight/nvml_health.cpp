// NVML's health and topology queries. nvml.h is often not installed, so, as
// in devices/nvml.cpp, the few entry points are declared with NVML's
// documented, stable ABI; an entry point a driver lacks leaves its fact unset.
#include <array>

#include <fmt/format.h>

#include "devices/shared_library.hpp"
#include "sgpu/launcher/preflight/health.hpp"

namespace sgpu::launcher::preflight {
namespace {

using Ret = int;  // nvmlReturn_t
constexpr Ret kOk = 0;
struct NvmlDevice;
using Dev = NvmlDevice*;
struct Memory {  // nvmlMemory_t
  unsigned long long total, free, used;
};
struct ProcessInfo {  // nvmlProcessInfo_v2_t, filled by nvmlDeviceGetComputeRunningProcesses_v3
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id, compute_instance_id;
};
static_assert(sizeof(ProcessInfo) == 24);
constexpr unsigned kMaxNvLinks = 18;         // NVML_NVLINK_MAX_LINKS
constexpr int kP2pRead = 0, kP2pNvlink = 2;  // nvmlGpuP2PCapsIndex_t
constexpr int kErrorCorrected = 0, kErrorUncorrected = 1, kCounterVolatile = 0, kCounterAggregate = 1;

struct Nvml {
  SharedLibrary lib{"libnvidia-ml.so.1"};
  template <class F>
  F fn(const char* name) {
    return lib.function<F>(name);
  }
  Ret (*init)() = fn<Ret (*)()>("nvmlInit_v2");
  Ret (*shutdown)() = fn<Ret (*)()>("nvmlShutdown");
  Ret (*by_bus)(const char*, Dev*) = fn<Ret (*)(const char*, Dev*)>("nvmlDeviceGetHandleByPciBusId_v2");
  Ret (*memory)(Dev, Memory*) = fn<Ret (*)(Dev, Memory*)>("nvmlDeviceGetMemoryInfo");
  Ret (*ecc)(Dev, int, int,
             unsigned long long*) = fn<Ret (*)(Dev, int, int, unsigned long long*)>("nvmlDeviceGetTotalEccErrors");
  Ret (*retired_pending)(Dev, int*) = fn<Ret (*)(Dev, int*)>("nvmlDeviceGetRetiredPagesPendingStatus");
  Ret (*remapped)(Dev, unsigned*, unsigned*, unsigned*, unsigned*) =
      fn<Ret (*)(Dev, unsigned*, unsigned*, unsigned*, unsigned*)>("nvmlDeviceGetRemappedRows");
  Ret (*clock_events)(Dev, unsigned long long*) =
      fn<Ret (*)(Dev, unsigned long long*)>("nvmlDeviceGetCurrentClocksEventReasons");
  Ret (*throttle)(Dev, unsigned long long*) =
      fn<Ret (*)(Dev, unsigned long long*)>("nvmlDeviceGetCurrentClocksThrottleReasons");
  Ret (*temperature)(Dev, int, unsigned*) = fn<Ret (*)(Dev, int, unsigned*)>("nvmlDeviceGetTemperature");
  Ret (*persistence)(Dev, int*) = fn<Ret (*)(Dev, int*)>("nvmlDeviceGetPersistenceMode");
  Ret (*mig)(Dev, unsigned*, unsigned*) = fn<Ret (*)(Dev, unsigned*, unsigned*)>("nvmlDeviceGetMigMode");
  Ret (*compute_mode)(Dev, int*) = fn<Ret (*)(Dev, int*)>("nvmlDeviceGetComputeMode");
  Ret (*processes)(Dev, unsigned*,
                   ProcessInfo*) = fn<Ret (*)(Dev, unsigned*, ProcessInfo*)>("nvmlDeviceGetComputeRunningProcesses_v3");
  Ret (*nvlink_state)(Dev, unsigned, int*) = fn<Ret (*)(Dev, unsigned, int*)>("nvmlDeviceGetNvLinkState");
  Ret (*p2p)(Dev, Dev, int, int*) = fn<Ret (*)(Dev, Dev, int, int*)>("nvmlDeviceGetP2PStatus");
  Ret (*ancestor)(Dev, Dev, int*) = fn<Ret (*)(Dev, Dev, int*)>("nvmlDeviceGetTopologyCommonAncestor");
};

template <class T, class F, class... A>
std::optional<T> ask(F f, A... args) {
  T value{};
  if (f == nullptr || f(args..., &value) != kOk) return std::nullopt;
  return value;
}

GpuHealth read_gpu(Nvml& nvml, Dev d, const env::Gpu& gpu) {
  GpuHealth h = unread(gpu);
  h.memory_total = gpu.memory_bytes;
  if (auto m = ask<Memory>(nvml.memory, d)) {
    h.memory_total = m->total;
    h.memory_used = m->used;
  }
  h.ecc_volatile_uncorrected = ask<unsigned long long>(nvml.ecc, d, kErrorUncorrected, kCounterVolatile);
  h.ecc_aggregate_uncorrected = ask<unsigned long long>(nvml.ecc, d, kErrorUncorrected, kCounterAggregate);
  h.ecc_volatile_corrected = ask<unsigned long long>(nvml.ecc, d, kErrorCorrected, kCounterVolatile);
  if (auto p = ask<int>(nvml.retired_pending, d)) h.retired_pages_pending = *p != 0;
  unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
  if (nvml.remapped != nullptr && nvml.remapped(d, &corrected, &uncorrected, &pending, &failed) == kOk) {
    h.remapped_rows_pending = pending != 0;
    h.remap_failed = failed != 0;
  }
  h.throttle_reasons = ask<unsigned long long>(nvml.clock_events, d);
  if (!h.throttle_reasons) h.throttle_reasons = ask<unsigned long long>(nvml.throttle, d);
  h.temperature_c = ask<unsigned>(nvml.temperature, d, 0);
  if (auto p = ask<int>(nvml.persistence, d)) h.persistence_mode = *p != 0;
  unsigned current = 0, pending_mig = 0;
  if (nvml.mig != nullptr && nvml.mig(d, &current, &pending_mig) == kOk) h.mig_enabled = current != 0;
  h.compute_mode = ask<int>(nvml.compute_mode, d);
  if (nvml.processes != nullptr) {
    std::array<ProcessInfo, 64> infos{};
    unsigned count = infos.size();
    if (nvml.processes(d, &count, infos.data()) == kOk) {
      for (unsigned i = 0; i < count && i < infos.size(); ++i) h.pids.push_back(infos[i].pid);
    }
  }
  for (unsigned link = 0; link < kMaxNvLinks && nvml.nvlink_state != nullptr; ++link) {
    int active = 0;
    if (nvml.nvlink_state(d, link, &active) != kOk) continue;
    (active != 0 ? h.nvlinks_active : h.nvlinks_inactive) += 1;
  }
  return h;
}

}  // namespace

GpuHealth unread(const env::Gpu& g) {
  GpuHealth h;
  h.index = g.index;
  h.name = g.name;
  h.type = g.type;
  h.uuid = g.uuid;
  h.pci_bus_id = g.pci_bus_id;
  h.read = false;
  return h;
}

HealthReport query_health(const std::vector<env::Gpu>& gpus) {
  HealthReport report;
  Nvml nvml;
  auto cannot = [&](std::string why) {
    report.error = std::move(why);
    for (const auto& g : gpus) report.gpus.push_back(unread(g));
    return report;
  };
  if (!nvml.lib.loaded()) return cannot(nvml.lib.error());
  if (nvml.init == nullptr || nvml.shutdown == nullptr || nvml.by_bus == nullptr)
    return cannot("libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetHandleByPciBusId_v2");
  if (auto r = nvml.init(); r != kOk)
    return cannot(fmt::format("libnvidia-ml.so.1: nvmlInit failed (NVML error {})", r));
  std::vector<Dev> handles;
  for (const auto& g : gpus) {
    Dev d = nullptr;
    if (nvml.by_bus(g.pci_bus_id.c_str(), &d) != kOk) d = nullptr;
    handles.push_back(d);
    // NVML runs, so every GPU was read; one whose bus id it does not know keeps its facts unset.
    report.gpus.push_back(d != nullptr ? read_gpu(nvml, d, g) : unread(g));
    report.gpus.back().read = true;
    report.gpus.back().found = d != nullptr;
  }
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    for (std::size_t k = i + 1; k < gpus.size(); ++k) {
      LinkHealth link;
      link.a = gpus[i].index;
      link.b = gpus[k].index;
      link.path = "?";
      if (handles[i] != nullptr && handles[k] != nullptr) {
        if (auto s = ask<int>(nvml.p2p, handles[i], handles[k], kP2pRead)) link.p2p_read = *s == 0;
        if (auto s = ask<int>(nvml.p2p, handles[i], handles[k], kP2pNvlink)) link.p2p_nvlink = *s == 0;
        if (auto level = ask<int>(nvml.ancestor, handles[i], handles[k])) link.path = topology_path(*level);
        if (link.p2p_nvlink == true) link.path = "NV";
      }
      report.links.push_back(link);
    }
  }
  nvml.shutdown();
  report.ok = true;
  return report;
}

GateResult health_gate(const std::vector<env::Gpu>& gpus) {
  GateResult out;
  if (gpus.empty()) return out;
  auto report = query_health(gpus);
  if (!report.ok) {
    out.error = report.error;
    return out;
  }
  for (const auto& g : report.gpus)
    if (auto why = gate_reason(g); !why.empty()) out.failures.push_back({g.index, why});
  return out;
}

// NVML's event API, with its documented ABI (nvml.h is often not installed).
struct XidWatch::Impl {
  struct EventData {  // nvmlEventData_t
    Dev device;
    unsigned long long type;
    unsigned long long data;  // the XID
    unsigned gpu_instance, compute_instance;
  };
  using Set = void*;                                            // nvmlEventSet_t
  static constexpr unsigned long long kXidCriticalError = 0x8;  // nvmlEventTypeXidCriticalError
  static constexpr Ret kTimeout = 10;                           // NVML_ERROR_TIMEOUT

  Nvml nvml;
  Ret (*create)(Set*) = nvml.fn<Ret (*)(Set*)>("nvmlEventSetCreate");
  Ret (*add)(Dev, unsigned long long, Set) = nvml.fn<Ret (*)(Dev, unsigned long long, Set)>("nvmlDeviceRegisterEvents");
  Ret (*wait)(Set, EventData*, unsigned) = nvml.fn<Ret (*)(Set, EventData*, unsigned)>("nvmlEventSetWait_v2");
  Ret (*free)(Set) = nvml.fn<Ret (*)(Set)>("nvmlEventSetFree");
  Set set = nullptr;
  bool initialized = false;
  std::vector<std::pair<Dev, int>> devices;  // NVML's handle, sgpu's index

  explicit Impl(const std::vector<env::Gpu>& gpus) {
    if (!nvml.lib.loaded() || nvml.init == nullptr || nvml.by_bus == nullptr || create == nullptr || add == nullptr ||
        wait == nullptr || free == nullptr || nvml.init() != kOk)
      return;
    initialized = true;
    if (create(&set) != kOk) {
      set = nullptr;
      return;
    }
    for (const auto& g : gpus) {
      Dev d = nullptr;
      // A GPU that has no such events (or is not found) is still read by the gate.
      if (nvml.by_bus(g.pci_bus_id.c_str(), &d) == kOk && add(d, kXidCriticalError, set) == kOk)
        devices.emplace_back(d, g.index);
    }
  }
  ~Impl() {
    if (set != nullptr) free(set);
    if (initialized) nvml.shutdown();
  }
};

XidWatch::XidWatch(const std::vector<env::Gpu>& gpus) : impl_(std::make_unique<Impl>(gpus)) {}
XidWatch::~XidWatch() = default;

bool XidWatch::watching() const { return impl_->set != nullptr && !impl_->devices.empty(); }

std::vector<XidWatch::Event> XidWatch::drain() {
  std::vector<Event> out;
  if (!watching()) return out;
  Impl::EventData data{};
  // A bounded loop: a driver that kept answering would otherwise hold the gate.
  for (int n = 0; n < 4096 && impl_->wait(impl_->set, &data, 0) == kOk; ++n) {
    if ((data.type & Impl::kXidCriticalError) == 0) continue;
    for (const auto& [device, index] : impl_->devices)
      if (device == data.device) out.push_back({index, data.data});
  }
  return out;
}

}  // namespace sgpu::launcher::preflight
