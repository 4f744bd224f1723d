// GPU discovery through the CUDA driver API (libcuda.so.1), for a node where
// NVML is missing. Declared here with the driver's documented ABI; where
// cuda.h is installed the types are checked against it at compile time.
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

#include "devices/shared_library.hpp"
#include "sgpu/launcher/devices/devices.hpp"

#ifdef SGPU_HAVE_CUDA_HEADERS
#include <cuda.h>
#endif

namespace sgpu::launcher {
namespace {

using CuResult = int;  // CUresult, an enum passed as int
using CuDevice = int;  // CUdevice
struct CuUuid {        // CUuuid
  unsigned char bytes[16];
};
constexpr CuResult kCudaSuccess = 0;

#ifdef SGPU_HAVE_CUDA_HEADERS
static_assert(sizeof(::CUresult) == sizeof(CuResult) && sizeof(::CUdevice) == sizeof(CuDevice));
static_assert(sizeof(::CUuuid) == sizeof(CuUuid));
static_assert(CUDA_SUCCESS == kCudaSuccess);
#endif

std::string result_name(CuResult r) {
  switch (r) {  // the stub library and old drivers cannot name their own errors
    case 3:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case 34:
      return "CUDA_ERROR_STUB_LIBRARY: this libcuda.so.1 is the CUDA toolkit's stub, not a driver";
    case 35:
      return "CUDA_ERROR_INSUFFICIENT_DRIVER";
    case 100:
      return "CUDA_ERROR_NO_DEVICE";
    default:
      return fmt::format("CUDA error {}", r);
  }
}

// cuInit reads CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER once. To list every
// GPU, in the PCI order ranks will use, they are changed around the call and
// put back (sgpu has one thread at this point).
class CudaInitEnvironment {
 public:
  CudaInitEnvironment() {
    save("CUDA_VISIBLE_DEVICES", visible_);
    save("CUDA_DEVICE_ORDER", order_);
    ::unsetenv("CUDA_VISIBLE_DEVICES");
    ::setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
  }
  ~CudaInitEnvironment() {
    restore("CUDA_VISIBLE_DEVICES", visible_);
    restore("CUDA_DEVICE_ORDER", order_);
  }
  CudaInitEnvironment(const CudaInitEnvironment&) = delete;
  CudaInitEnvironment& operator=(const CudaInitEnvironment&) = delete;

 private:
  static void save(const char* name, std::optional<std::string>& into) {
    if (const char* v = std::getenv(name)) into = v;
  }
  static void restore(const char* name, const std::optional<std::string>& value) {
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  std::optional<std::string> visible_, order_;
};

}  // namespace

DriverReport query_cuda_driver() {
  DriverReport report;
  SharedLibrary lib("libcuda.so.1");
  if (!lib.loaded()) {
    report.error = lib.error();
    return report;
  }
  auto init = lib.function<CuResult (*)(unsigned)>("cuInit");
  auto get_name = lib.function<CuResult (*)(CuResult, const char**)>("cuGetErrorName");
  auto version = lib.function<CuResult (*)(int*)>("cuDriverGetVersion");
  auto count = lib.function<CuResult (*)(int*)>("cuDeviceGetCount");
  auto device = lib.function<CuResult (*)(CuDevice*, int)>("cuDeviceGet");
  auto name = lib.function<CuResult (*)(char*, int, CuDevice)>("cuDeviceGetName");
  auto memory = lib.function<CuResult (*)(std::size_t*, CuDevice)>("cuDeviceTotalMem_v2");
  auto uuid = lib.function<CuResult (*)(CuUuid*, CuDevice)>("cuDeviceGetUuid_v2");
  if (uuid == nullptr) uuid = lib.function<CuResult (*)(CuUuid*, CuDevice)>("cuDeviceGetUuid");
  auto bus_id = lib.function<CuResult (*)(char*, int, CuDevice)>("cuDeviceGetPCIBusId");
  auto why = [&](CuResult r) {
    const char* text = nullptr;
    if (get_name != nullptr && get_name(r, &text) == kCudaSuccess && text != nullptr) return std::string(text);
    return result_name(r);
  };
  if (!init || !count || !device || !name) {
    report.error = "libcuda.so.1 lacks cuInit or the device functions";
    return report;
  }
  CuResult r = kCudaSuccess;
  {
    CudaInitEnvironment scope;
    r = init(0);
  }
  if (r != kCudaSuccess) {
    report.error = "libcuda.so.1: cuInit failed: " + why(r);
    return report;
  }
  int driver = 0;
  if (version != nullptr && version(&driver) == kCudaSuccess)
    report.version = fmt::format("CUDA {}.{}", driver / 1000, driver % 1000 / 10);
  int n = 0;
  if (r = count(&n); r != kCudaSuccess) {
    report.error = "cuDeviceGetCount failed: " + why(r);
    return report;
  }
  for (int i = 0; i < n; ++i) {
    CuDevice d = 0;
    char text[256] = {};
    if (r = device(&d, i); r == kCudaSuccess) r = name(text, sizeof text, d);
    if (r != kCudaSuccess) {
      report.skipped.push_back(fmt::format("CUDA device {} skipped: {}", i, why(r)));
      continue;
    }
    env::Gpu g;
    g.name = text;
    std::size_t bytes = 0;
    if (memory != nullptr && memory(&bytes, d) == kCudaSuccess) g.memory_bytes = bytes;
    CuUuid u{};
    if (uuid != nullptr && uuid(&u, d) == kCudaSuccess) {
      const auto* b = u.bytes;
      g.uuid = fmt::format(
          "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
          b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    char bus[64] = {};
    if (bus_id != nullptr && bus_id(bus, sizeof bus, d) == kCudaSuccess) g.pci_bus_id = bus;
    report.gpus.push_back(std::move(g));
  }
  report.ok = true;
  return report;
}

}  // namespace sgpu::launcher
