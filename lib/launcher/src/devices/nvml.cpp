// GPU discovery through NVML (libnvidia-ml.so.1, shipped with every NVIDIA
// driver). nvml.h is often not installed, so the few functions sgpu calls are
// declared here with NVML's documented, stable ABI; where nvml.h exists the
// struct layouts are checked against it at compile time.
#include <array>
#include <cstddef>

#include <fmt/format.h>

#include "devices/shared_library.hpp"
#include "sgpu/launcher/devices/devices.hpp"

#if defined(SGPU_HAVE_CUDA_HEADERS) && __has_include(<nvml.h>)
#include <nvml.h>
#define SGPU_CHECK_NVML_ABI 1
#endif

namespace sgpu::launcher {
namespace {

using NvmlReturn = int;  // nvmlReturn_t, an enum passed as int
constexpr NvmlReturn kNvmlSuccess = 0;
struct NvmlDevice;
using NvmlDeviceHandle = NvmlDevice*;  // nvmlDevice_t
struct NvmlMemory {                    // nvmlMemory_t (v1)
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct NvmlPciInfo {  // nvmlPciInfo_t, as filled by nvmlDeviceGetPciInfo_v3
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
};
constexpr unsigned kNameSize = 96;     // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kUuidSize = 96;     // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr unsigned kVersionSize = 80;  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE

static_assert(sizeof(NvmlPciInfo) == 68 && offsetof(NvmlPciInfo, bus_id) == 36);
#ifdef SGPU_CHECK_NVML_ABI
static_assert(sizeof(NvmlPciInfo) == sizeof(::nvmlPciInfo_t) && offsetof(::nvmlPciInfo_t, busId) == 36);
static_assert(sizeof(NvmlMemory) == sizeof(::nvmlMemory_t) && sizeof(::nvmlReturn_t) == sizeof(NvmlReturn));
static_assert(NVML_DEVICE_NAME_V2_BUFFER_SIZE == kNameSize && NVML_DEVICE_UUID_V2_BUFFER_SIZE == kUuidSize);
#endif

struct Nvml {
  SharedLibrary lib{"libnvidia-ml.so.1"};
  NvmlReturn (*init)() = lib.function<NvmlReturn (*)()>("nvmlInit_v2");
  NvmlReturn (*shutdown)() = lib.function<NvmlReturn (*)()>("nvmlShutdown");
  const char* (*error_string)(NvmlReturn) = lib.function<const char* (*)(NvmlReturn)>("nvmlErrorString");
  NvmlReturn (*driver_version)(char*,
                               unsigned) = lib.function<NvmlReturn (*)(char*, unsigned)>("nvmlSystemGetDriverVersion");
  NvmlReturn (*count)(unsigned*) = lib.function<NvmlReturn (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  NvmlReturn (*handle)(unsigned, NvmlDeviceHandle*) =
      lib.function<NvmlReturn (*)(unsigned, NvmlDeviceHandle*)>("nvmlDeviceGetHandleByIndex_v2");
  NvmlReturn (*name)(NvmlDeviceHandle, char*,
                     unsigned) = lib.function<NvmlReturn (*)(NvmlDeviceHandle, char*, unsigned)>("nvmlDeviceGetName");
  NvmlReturn (*uuid)(NvmlDeviceHandle, char*,
                     unsigned) = lib.function<NvmlReturn (*)(NvmlDeviceHandle, char*, unsigned)>("nvmlDeviceGetUUID");
  NvmlReturn (*memory)(NvmlDeviceHandle, NvmlMemory*) =
      lib.function<NvmlReturn (*)(NvmlDeviceHandle, NvmlMemory*)>("nvmlDeviceGetMemoryInfo");
  NvmlReturn (*pci)(NvmlDeviceHandle, NvmlPciInfo*) =
      lib.function<NvmlReturn (*)(NvmlDeviceHandle, NvmlPciInfo*)>("nvmlDeviceGetPciInfo_v3");
  // (device, words, bitmask, scope): the NUMA nodes nearest the GPU (R470 and later)
  NvmlReturn (*memory_affinity)(NvmlDeviceHandle, unsigned, unsigned long*, int) =
      lib.function<NvmlReturn (*)(NvmlDeviceHandle, unsigned, unsigned long*, int)>("nvmlDeviceGetMemoryAffinity");
  // (device, words, bitmask): the CPUs nearest the GPU
  NvmlReturn (*cpu_affinity)(NvmlDeviceHandle, unsigned, unsigned long*) =
      lib.function<NvmlReturn (*)(NvmlDeviceHandle, unsigned, unsigned long*)>("nvmlDeviceGetCpuAffinity");

  std::string why(NvmlReturn r) const {
    const char* text = error_string != nullptr ? error_string(r) : nullptr;
    return fmt::format("{} (NVML error {})", text != nullptr ? text : "unknown error", r);
  }
};

constexpr int kAffinityScopeNode = 0;  // NVML_AFFINITY_SCOPE_NODE
constexpr unsigned kMaskWords = 64;    // 4096 CPUs or NUMA nodes
constexpr unsigned kWordBits = 8 * sizeof(unsigned long);

std::vector<int> bits_of(const std::array<unsigned long, kMaskWords>& mask) {
  std::vector<int> out;
  for (unsigned w = 0; w < kMaskWords; ++w)
    for (unsigned b = 0; b < kWordBits; ++b)
      if ((mask[w] >> b) & 1UL) out.push_back(static_cast<int>(w * kWordBits + b));
  return out;
}

// The GPU's NUMA node, else the CPUs nearest it (binding, plan/binding.hpp).
void read_locality(const Nvml& nvml, NvmlDeviceHandle device, env::Gpu& g) {
  std::array<unsigned long, kMaskWords> mask{};
  if (nvml.memory_affinity &&
      nvml.memory_affinity(device, kMaskWords, mask.data(), kAffinityScopeNode) == kNvmlSuccess) {
    auto nodes = bits_of(mask);
    if (nodes.size() == 1) g.numa_node = nodes.front();
  }
  mask.fill(0);
  if (g.numa_node < 0 && nvml.cpu_affinity && nvml.cpu_affinity(device, kMaskWords, mask.data()) == kNvmlSuccess)
    g.local_cpus = bits_of(mask);
}

}  // namespace

DriverReport query_nvml() {
  DriverReport report;
  Nvml nvml;
  if (!nvml.lib.loaded()) {
    report.error = nvml.lib.error();
    return report;
  }
  if (!nvml.init || !nvml.shutdown || !nvml.count || !nvml.handle || !nvml.name) {
    report.error = "libnvidia-ml.so.1 lacks nvmlInit_v2 or the device functions (a driver older than 2016?)";
    return report;
  }
  if (auto r = nvml.init(); r != kNvmlSuccess) {
    report.error = "libnvidia-ml.so.1: nvmlInit failed: " + nvml.why(r);
    return report;
  }
  std::array<char, kVersionSize> version{};
  if (nvml.driver_version && nvml.driver_version(version.data(), kVersionSize) == kNvmlSuccess)
    report.version = version.data();
  unsigned count = 0;
  if (auto r = nvml.count(&count); r != kNvmlSuccess) {
    report.error = "nvmlDeviceGetCount failed: " + nvml.why(r);
    nvml.shutdown();
    return report;
  }
  for (unsigned i = 0; i < count; ++i) {
    NvmlDeviceHandle device = nullptr;
    std::array<char, kNameSize> name{};
    if (auto r = nvml.handle(i, &device); r != kNvmlSuccess) {
      report.skipped.push_back(fmt::format("NVML device {} skipped: {}", i, nvml.why(r)));
      continue;
    }
    if (auto r = nvml.name(device, name.data(), kNameSize); r != kNvmlSuccess) {
      report.skipped.push_back(fmt::format("NVML device {} skipped: {}", i, nvml.why(r)));
      continue;
    }
    env::Gpu g;
    g.name = name.data();
    std::array<char, kUuidSize> uuid{};
    if (nvml.uuid && nvml.uuid(device, uuid.data(), kUuidSize) == kNvmlSuccess) g.uuid = uuid.data();
    NvmlMemory memory{};
    if (nvml.memory && nvml.memory(device, &memory) == kNvmlSuccess) g.memory_bytes = memory.total;
    NvmlPciInfo pci{};
    if (nvml.pci && nvml.pci(device, &pci) == kNvmlSuccess) g.pci_bus_id = pci.bus_id;
    read_locality(nvml, device, g);
    report.gpus.push_back(std::move(g));
  }
  nvml.shutdown();
  report.ok = true;
  return report;
}

}  // namespace sgpu::launcher
