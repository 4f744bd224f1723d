// A fake libnvidia-ml.so.1 for tests on machines without GPUs: the NVML entry
// points sgpu calls, answering from SGPU_FAKE_DRIVER_* (fake_config.hpp), with
// injectable ECC errors, processes on a GPU, missing P2P and XID events. Never
// for production.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_config.hpp"

namespace {
struct FakeDevice {
  int index;
};
FakeDevice devices[64];
using Ret = int;
constexpr Ret kOk = 0, kInvalid = 2, kNotSupported = 3, kNotFound = 6;

int index_of(void* d) { return static_cast<FakeDevice*>(d)->index; }
bool no_p2p(int a, int b) {
  const char* v = sgpu_fake::env("SGPU_FAKE_DRIVER_NO_P2P");  // "0-1"
  if (v == nullptr) return false;
  int x = -1, y = -1;
  if (std::sscanf(v, "%d-%d", &x, &y) != 2) return false;
  return (x == a && y == b) || (x == b && y == a);
}
}  // namespace

extern "C" {
Ret nvmlInit_v2() {
  for (int i = 0; i < 64; ++i) devices[i].index = i;
  return kOk;
}
Ret nvmlShutdown() { return kOk; }
const char* nvmlErrorString(Ret) { return "fake NVML error"; }
Ret nvmlSystemGetDriverVersion(char* v, unsigned n) {
  std::snprintf(v, n, "%s", "999.99-fake");
  return kOk;
}
Ret nvmlDeviceGetCount_v2(unsigned* n) {
  *n = static_cast<unsigned>(sgpu_fake::gpu_count());
  return kOk;
}
Ret nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) {
  if (static_cast<int>(i) >= sgpu_fake::gpu_count()) return kInvalid;
  *d = &devices[i];
  return kOk;
}
Ret nvmlDeviceGetHandleByPciBusId_v2(const char* bus, void** d) {
  for (int i = 0; i < sgpu_fake::gpu_count(); ++i) {
    if (strcasecmp(sgpu_fake::bus_id(i).c_str(), bus) == 0) {
      *d = &devices[i];
      return kOk;
    }
  }
  return kNotFound;
}
Ret nvmlDeviceGetName(void*, char* name, unsigned n) {
  std::snprintf(name, n, "%s", sgpu_fake::gpu_name().c_str());
  return kOk;
}
Ret nvmlDeviceGetUUID(void* d, char* uuid, unsigned n) {
  std::snprintf(uuid, n, "GPU-fa4e0000-0000-0000-0000-%012d", index_of(d));
  return kOk;
}
struct Memory {
  unsigned long long total, free, used;
};
Ret nvmlDeviceGetMemoryInfo(void*, Memory* m) {
  m->total = 80ULL << 30;
  m->used = 512ULL << 20;
  m->free = m->total - m->used;
  return kOk;
}
struct PciInfo {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
Ret nvmlDeviceGetPciInfo_v3(void* d, PciInfo* p) {
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->bus_id, sizeof p->bus_id, "%s", sgpu_fake::bus_id(index_of(d)).c_str());
  p->bus = static_cast<unsigned>(0x18 + index_of(d));
  return kOk;
}
// SGPU_FAKE_DRIVER_NUMA="0,0,1,1": GPU i's NUMA node, the i-th entry; unset
// (or no entry for the GPU): NVML cannot tell, as on a machine without NUMA.
Ret nvmlDeviceGetMemoryAffinity(void* d, unsigned words, unsigned long* set, int scope) {
  int node = sgpu_fake::nth_number("SGPU_FAKE_DRIVER_NUMA", index_of(d));
  if (node < 0 || scope != 0) return kNotSupported;
  if (static_cast<unsigned>(node) >= words * 8 * sizeof(unsigned long)) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  std::memset(set, 0, words * sizeof(unsigned long));
  set[node / (8 * sizeof(unsigned long))] = 1UL << (node % (8 * sizeof(unsigned long)));
  return kOk;
}
Ret nvmlDeviceGetCpuAffinity(void*, unsigned, unsigned long*) { return kNotSupported; }
Ret nvmlDeviceGetTotalEccErrors(void* d, int error_type, int counter, unsigned long long* count) {
  bool uncorrected_volatile = error_type == 1 && counter == 0;
  *count = uncorrected_volatile
               ? static_cast<unsigned long long>(sgpu_fake::keyed("SGPU_FAKE_DRIVER_ECC", index_of(d), 0))
               : 0;
  return kOk;
}
Ret nvmlDeviceGetRemappedRows(void*, unsigned* corrected, unsigned* uncorrected, unsigned* pending, unsigned* failed) {
  *corrected = *uncorrected = *pending = *failed = 0;
  return kOk;
}
Ret nvmlDeviceGetCurrentClocksEventReasons(void*, unsigned long long* reasons) {
  *reasons = 0x1;  // idle
  return kOk;
}
// Sampling (--sample-every): GPU i is 30+10*i % busy, draws 100+i W of 700 W, runs at 1980 MHz.
struct Utilization {
  unsigned gpu, memory;
};
Ret nvmlDeviceGetUtilizationRates(void* d, Utilization* u) {
  u->gpu = static_cast<unsigned>(30 + 10 * index_of(d));
  u->memory = static_cast<unsigned>(5 + index_of(d));
  return kOk;
}
Ret nvmlDeviceGetPowerUsage(void* d, unsigned* milliwatts) {
  *milliwatts = static_cast<unsigned>((100 + index_of(d)) * 1000);
  return kOk;
}
Ret nvmlDeviceGetEnforcedPowerLimit(void*, unsigned* milliwatts) {
  *milliwatts = 700000;
  return kOk;
}
Ret nvmlDeviceGetClockInfo(void*, int clock, unsigned* mhz) {
  if (clock != 1) return kNotSupported;  // NVML_CLOCK_SM only
  *mhz = 1980;
  return kOk;
}
Ret nvmlDeviceGetTemperature(void*, int, unsigned* t) {
  *t = 35;
  return kOk;
}
Ret nvmlDeviceGetPersistenceMode(void*, int* mode) {
  *mode = 1;
  return kOk;
}
Ret nvmlDeviceGetMigMode(void*, unsigned*, unsigned*) { return kNotSupported; }
Ret nvmlDeviceGetComputeMode(void*, int* mode) {
  *mode = 0;
  return kOk;
}
struct ProcessInfo {
  unsigned pid;
  unsigned long long used;
  unsigned gi, ci;
};
Ret nvmlDeviceGetComputeRunningProcesses_v3(void* d, unsigned* count, ProcessInfo* infos) {
  long long pid = sgpu_fake::keyed("SGPU_FAKE_DRIVER_PIDS", index_of(d), 0);
  if (pid == 0) {
    *count = 0;
    return kOk;
  }
  if (*count < 1) return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  infos[0] = {static_cast<unsigned>(pid), 1ULL << 30, 0, 0};
  *count = 1;
  return kOk;
}
Ret nvmlDeviceGetNvLinkState(void*, unsigned link, int* active) {
  if (link >= 4) return kNotSupported;
  *active = 1;
  return kOk;
}
Ret nvmlDeviceGetP2PStatus(void* a, void* b, int, int* status) {
  *status = no_p2p(index_of(a), index_of(b)) ? 4 : 0;  // NVML_P2P_STATUS_NOT_SUPPORTED : OK
  return kOk;
}
Ret nvmlDeviceGetTopologyCommonAncestor(void*, void*, int* level) {
  *level = 40;  // NODE
  return kOk;
}
// XID events: SGPU_FAKE_DRIVER_XID_FILE names a file of "gpu:xid" lines, a
// line an event, in the order they happened; a test appends to it while the
// job runs. An event set sees the lines written after it was made.
struct EventSet {
  long offset = 0;
  unsigned long long types[64] = {};
};
struct EventData {
  void* device;
  unsigned long long type, data;
  unsigned gpu_instance, compute_instance;
};
constexpr unsigned long long kXid = 0x8;  // nvmlEventTypeXidCriticalError
Ret nvmlEventSetCreate(void** set) {
  auto* s = new EventSet;
  if (const char* path = std::getenv("SGPU_FAKE_DRIVER_XID_FILE"); path != nullptr)
    if (FILE* f = std::fopen(path, "r"); f != nullptr) {
      std::fseek(f, 0, SEEK_END);
      s->offset = std::ftell(f);
      std::fclose(f);
    }
  *set = s;
  return kOk;
}
Ret nvmlDeviceRegisterEvents(void* d, unsigned long long types, void* set) {
  static_cast<EventSet*>(set)->types[index_of(d)] |= types & kXid;
  return kOk;
}
Ret nvmlEventSetWait_v2(void* set, EventData* data, unsigned) {
  auto* s = static_cast<EventSet*>(set);
  const char* path = std::getenv("SGPU_FAKE_DRIVER_XID_FILE");
  FILE* f = path != nullptr ? std::fopen(path, "r") : nullptr;
  if (f == nullptr) return 10;  // NVML_ERROR_TIMEOUT: nothing came
  std::fseek(f, s->offset, SEEK_SET);
  int gpu = -1;
  unsigned long long xid = 0;
  Ret ret = 10;
  char line[64];
  while (ret != kOk && std::fgets(line, sizeof line, f) != nullptr) {
    s->offset = std::ftell(f);
    if (std::sscanf(line, "%d:%llu", &gpu, &xid) == 2 && gpu >= 0 && gpu < 64 && (s->types[gpu] & kXid) != 0) {
      *data = {&devices[gpu], kXid, xid, 0, 0};
      ret = kOk;
    }
  }
  std::fclose(f);
  return ret;
}
Ret nvmlEventSetFree(void* set) {
  delete static_cast<EventSet*>(set);
  return kOk;
}
}
