// A fake libcuda.so.1 for tests on machines without GPUs: the few driver API
// entry points sgpu calls, with "device memory" in host memory and every
// operation complete when it returns. Never for production.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_config.hpp"

namespace {
int visible_count() {
  int n = sgpu_fake::gpu_count();
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  if (cvd == nullptr) return n;
  if (*cvd == '\0') return 0;
  int listed = 1;
  for (const char* p = cvd; *p != '\0'; ++p) listed += *p == ',' ? 1 : 0;
  return listed < n ? listed : n;
}
bool initialized = false;
}  // namespace

extern "C" {
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;

CUresult cuInit(unsigned) {
  if (sgpu_fake::gpu_count() <= 0) return 100;  // CUDA_ERROR_NO_DEVICE
  initialized = true;
  return 0;
}
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}
CUresult cuGetErrorString(CUresult r, const char** text) {
  *text = r == 100 ? "no CUDA-capable device is detected (fake)" : "fake CUDA error";
  return 0;
}
CUresult cuGetErrorName(CUresult r, const char** text) { return cuGetErrorString(r, text); }
CUresult cuDeviceGetCount(int* n) {
  if (!initialized) return 3;
  *n = visible_count();
  return 0;
}
CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (!initialized) return 3;
  if (ordinal < 0 || ordinal >= visible_count()) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *d = ordinal;
  return 0;
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, static_cast<std::size_t>(len), "%s", sgpu_fake::gpu_name().c_str());
  return 0;
}
CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice) {
  *bytes = 80ULL << 30;
  return 0;
}
CUresult cuDeviceGetPCIBusId(char* text, int len, CUdevice d) {
  std::snprintf(text, static_cast<std::size_t>(len), "%s", sgpu_fake::bus_id(d).c_str());
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void** ctx, CUdevice d) {
  static int contexts[64];
  *ctx = &contexts[d & 63];
  return 0;
}
CUresult cuCtxSetCurrent(void*) { return 0; }
CUresult cuMemAlloc_v2(CUdeviceptr* p, std::size_t bytes) {
  void* m = std::malloc(bytes == 0 ? 1 : bytes);
  if (m == nullptr) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  *p = reinterpret_cast<CUdeviceptr>(m);
  return 0;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  std::free(reinterpret_cast<void*>(p));
  return 0;
}
CUresult cuMemsetD32_v2(CUdeviceptr p, unsigned value, std::size_t n) {
  auto* words = reinterpret_cast<unsigned*>(p);
  for (std::size_t i = 0; i < n; ++i) words[i] = value;
  return 0;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, std::size_t bytes) {
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return 0;
}
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, std::size_t bytes) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return 0;
}
CUresult cuStreamCreate(void** stream, unsigned) {
  static int streams[64];
  *stream = &streams[0];
  return 0;
}
CUresult cuStreamSynchronize(void*) { return 0; }
}
