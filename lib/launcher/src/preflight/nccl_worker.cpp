// The all-reduce worker against the CUDA driver API and NCCL, both loaded with
// dlopen: the binary needs neither to start. Compiled against the toolkit's
// cuda.h and nccl.h where the build found them; without them the worker only
// says the check is off. No kernels: NCCL reduces, cuMemcpy reads back.
#include <cstdio>
#include <cstring>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "devices/shared_library.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/preflight/checks.hpp"
#include "sgpu/launcher/preflight/worker.hpp"

#ifdef SGPU_HAVE_CUDA_HEADERS
#include <cuda.h>
#include <nccl.h>
#endif

namespace sgpu::launcher::preflight {

std::string to_hex(const unsigned char* bytes, std::size_t n) {
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", bytes[i]);
  return out;
}

void from_hex(const std::string& hex, unsigned char* bytes, std::size_t n) {
  auto digit = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw Error(fmt::format("{}: '{}' is not a hex digit", kUniqueIdVariable, c));
  };
  if (hex.size() != 2 * n)
    throw Error(fmt::format("{}: {} hex digits, expected {}", kUniqueIdVariable, hex.size(), 2 * n));
  for (std::size_t i = 0; i < n; ++i)
    bytes[i] = static_cast<unsigned char>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
}

namespace {

void emit(const nlohmann::json& line) {
  std::fputs((line.dump() + "\n").c_str(), stdout);
  std::fflush(stdout);
}

int report_error(std::string_view kind, const std::string& message) {
  emit({{"event", "error"}, {"kind", kind}, {"message", message}});
  bool stack_missing = kind == "no_driver" || kind == "no_nccl" || kind == "no_gpu" || kind == "unsupported";
  return stack_missing ? 3 : 1;
}

}  // namespace

#ifndef SGPU_HAVE_CUDA_HEADERS

int run_worker(const WorkerOptions&) {
  return report_error(
      "unsupported",
      "this sgpu was built without the CUDA and NCCL headers (cuda.h, nccl.h): the all-reduce check is off");
}

#else

namespace {

struct Cuda {
  SharedLibrary lib{"libcuda.so.1"};
  decltype(&::cuInit) init = lib.function<decltype(&::cuInit)>("cuInit");
  decltype(&::cuGetErrorString) error_string = lib.function<decltype(&::cuGetErrorString)>("cuGetErrorString");
  decltype(&::cuDeviceGetCount) count = lib.function<decltype(&::cuDeviceGetCount)>("cuDeviceGetCount");
  decltype(&::cuDeviceGet) device = lib.function<decltype(&::cuDeviceGet)>("cuDeviceGet");
  decltype(&::cuDevicePrimaryCtxRetain) retain =
      lib.function<decltype(&::cuDevicePrimaryCtxRetain)>("cuDevicePrimaryCtxRetain");
  decltype(&::cuCtxSetCurrent) set_current = lib.function<decltype(&::cuCtxSetCurrent)>("cuCtxSetCurrent");
  decltype(&::cuMemAlloc) alloc = lib.function<decltype(&::cuMemAlloc)>("cuMemAlloc_v2");
  decltype(&::cuMemFree) mem_free = lib.function<decltype(&::cuMemFree)>("cuMemFree_v2");
  decltype(&::cuMemsetD32) memset32 = lib.function<decltype(&::cuMemsetD32)>("cuMemsetD32_v2");
  decltype(&::cuMemcpyHtoD) to_device = lib.function<decltype(&::cuMemcpyHtoD)>("cuMemcpyHtoD_v2");
  decltype(&::cuMemcpyDtoH) to_host = lib.function<decltype(&::cuMemcpyDtoH)>("cuMemcpyDtoH_v2");
  decltype(&::cuStreamCreate) stream_create = lib.function<decltype(&::cuStreamCreate)>("cuStreamCreate");
  decltype(&::cuStreamSynchronize) sync = lib.function<decltype(&::cuStreamSynchronize)>("cuStreamSynchronize");

  bool complete() const {
    return init && count && device && retain && set_current && alloc && memset32 && to_device && to_host &&
           stream_create && sync;
  }
  std::string why(CUresult r) const {
    const char* text = nullptr;
    if (error_string != nullptr && error_string(r, &text) == CUDA_SUCCESS && text != nullptr)
      return fmt::format("{} (CUDA error {})", text, static_cast<int>(r));
    return fmt::format("CUDA error {}", static_cast<int>(r));
  }
};

struct Nccl {
  SharedLibrary lib{"libnccl.so.2"};
  decltype(&::ncclGetVersion) version = lib.function<decltype(&::ncclGetVersion)>("ncclGetVersion");
  decltype(&::ncclGetUniqueId) unique_id = lib.function<decltype(&::ncclGetUniqueId)>("ncclGetUniqueId");
  decltype(&::ncclCommInitRank) init_rank = lib.function<decltype(&::ncclCommInitRank)>("ncclCommInitRank");
  decltype(&::ncclAllReduce) all_reduce = lib.function<decltype(&::ncclAllReduce)>("ncclAllReduce");
  decltype(&::ncclCommDestroy) destroy = lib.function<decltype(&::ncclCommDestroy)>("ncclCommDestroy");
  decltype(&::ncclGetErrorString) error_string = lib.function<decltype(&::ncclGetErrorString)>("ncclGetErrorString");

  bool complete() const { return version && unique_id && init_rank && all_reduce && destroy; }
  std::string why(ncclResult_t r) const {
    const char* text = error_string != nullptr ? error_string(r) : nullptr;
    return fmt::format("{} (NCCL error {})", text != nullptr ? text : "unknown", static_cast<int>(r));
  }
};

struct WorkerError {
  std::string kind, message;
};

void cuda_check(const Cuda& cuda, CUresult r, std::string_view what) {
  if (r != CUDA_SUCCESS) throw WorkerError{"cuda", fmt::format("{}: {}", what, cuda.why(r))};
}
void nccl_check(const Nccl& nccl, ncclResult_t r, std::string_view what) {
  if (r != ncclSuccess) throw WorkerError{"nccl", fmt::format("{}: {}", what, nccl.why(r))};
}

int run(const WorkerOptions& o) {
  Cuda cuda;
  if (!cuda.lib.loaded()) return report_error("no_driver", "no NVIDIA driver: " + cuda.lib.error());
  if (!cuda.complete()) return report_error("no_driver", "libcuda.so.1 lacks the driver API functions sgpu uses");
  Nccl nccl;
  if (!nccl.lib.loaded()) return report_error("no_nccl", "no NCCL: " + nccl.lib.error());
  if (!nccl.complete()) return report_error("no_nccl", "libnccl.so.2 lacks the functions sgpu uses");
  if (auto r = cuda.init(0); r != CUDA_SUCCESS)
    return report_error(r == CUDA_ERROR_NO_DEVICE ? "no_gpu" : "no_driver", "cuInit: " + cuda.why(r));
  int version = 0;
  nccl_check(nccl, nccl.version(&version), "ncclGetVersion");
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  cuda_check(cuda, cuda.device(&dev, o.device), fmt::format("cuDeviceGet({})", o.device));
  cuda_check(cuda, cuda.retain(&ctx, dev), "cuDevicePrimaryCtxRetain");  // the context NCCL's runtime uses
  cuda_check(cuda, cuda.set_current(ctx), "cuCtxSetCurrent");

  ncclUniqueId id{};
  if (o.rank == 0) {
    nccl_check(nccl, nccl.unique_id(&id), "ncclGetUniqueId");
    emit({{"event", "unique_id"}, {"id", to_hex(reinterpret_cast<unsigned char*>(id.internal), sizeof id.internal)}});
  } else {
    from_hex(o.unique_id_hex, reinterpret_cast<unsigned char*>(id.internal), sizeof id.internal);
  }
  ncclComm_t comm = nullptr;
  nccl_check(nccl, nccl.init_rank(&comm, o.nranks, id, o.rank), "ncclCommInitRank");
  emit({{"event", "ready"}, {"nccl_version", version}});

  std::uint64_t max_bytes = 0;
  for (auto b : o.sizes) max_bytes = std::max(max_bytes, b);
  std::uint64_t max_count = max_bytes / 4;
  auto host = std::make_unique_for_overwrite<float[]>(max_count);  // each page written once, by the fill
  fill_values(o.rank, host.get(), max_count);
  CUdeviceptr send = 0, recv = 0;
  CUstream stream = nullptr;
  cuda_check(cuda, cuda.alloc(&send, max_bytes), fmt::format("cuMemAlloc({} bytes)", max_bytes));
  cuda_check(cuda, cuda.alloc(&recv, max_bytes), fmt::format("cuMemAlloc({} bytes)", max_bytes));
  cuda_check(cuda, cuda.to_device(send, host.get(), max_bytes), "cuMemcpyHtoD");
  cuda_check(cuda, cuda.stream_create(&stream, 0), "cuStreamCreate");
  auto* s = reinterpret_cast<cudaStream_t>(stream);  // CUstream and cudaStream_t are one type

  for (auto bytes : o.sizes) {
    std::uint64_t count = bytes / 4;
    cuda_check(cuda, cuda.memset32(recv, 0, count), "cuMemsetD32");
    auto reduce = [&] {
      nccl_check(nccl,
                 nccl.all_reduce(reinterpret_cast<const void*>(send), reinterpret_cast<void*>(recv), count, ncclFloat32,
                                 ncclSum, comm, s),
                 fmt::format("ncclAllReduce({} bytes)", bytes));
    };
    for (int i = 0; i < o.warmup; ++i) reduce();
    cuda_check(cuda, cuda.sync(stream), "cuStreamSynchronize");
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.iters; ++i) reduce();
    cuda_check(cuda, cuda.sync(stream), "cuStreamSynchronize");
    std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;
    cuda_check(cuda, cuda.to_host(host.get(), recv, bytes), "cuMemcpyDtoH");
    nlohmann::json line = {
        {"event", "size"}, {"bytes", bytes}, {"time_us", elapsed.count() / std::max(o.iters, 1)}, {"wrong", 0}};
    std::uint64_t first = 0;
    std::uint64_t wrong = count_wrong(o.nranks, host.get(), count, &first);
    if (wrong > 0)
      line["first_wrong"] = {{"index", first}, {"got", host[first]}, {"want", expected_sum(o.nranks, first)}};
    line["wrong"] = wrong;
    emit(line);
    if (wrong > 0) break;  // the size that failed is the one to report; later ones add nothing
  }
  nccl_check(nccl, nccl.destroy(comm), "ncclCommDestroy");
  // The device memory goes back before the worker reports done: a driver
  // (or a leak checker) sees a clean exit.
  if (cuda.mem_free) {
    cuda.mem_free(send);
    cuda.mem_free(recv);
  }
  emit({{"event", "done"}});
  return 0;
}

}  // namespace

int run_worker(const WorkerOptions& options) {
  try {
    return run(options);
  } catch (const WorkerError& e) {
    return report_error(e.kind, e.message);
  } catch (const Error& e) {
    return report_error("usage", e.what());
  }
}

#endif

}  // namespace sgpu::launcher::preflight
