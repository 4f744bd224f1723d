#pragma once
// One GPU's side of the all-reduce check, run in its own process
// (`sgpu doctor --worker`, started by preflight.hpp): loads libcuda.so.1 and
// libnccl.so.2, joins the NCCL communicator, times an all-reduce of every
// size and checks every value it reads back. It reports on stdout, one JSON
// object a line: {"event": "unique_id", "id": hex} (rank 0, before joining),
// "ready", one "size" per size, "done", or "error" with "kind" (no_driver,
// no_nccl, no_gpu, unsupported, cuda, nccl) and "message".
#include <cstdint>
#include <string>
#include <vector>

namespace sgpu::launcher::preflight {

struct WorkerOptions {
  int rank = 0;
  int nranks = 1;
  int device = 0;  // CUDA ordinal among the visible devices
  std::vector<std::uint64_t> sizes;
  int warmup = 5;
  int iters = 20;
  std::string unique_id_hex;  // ranks > 0: rank 0's NCCL unique id
};

// Exit code: 0 done, 3 the GPU stack is missing (no_driver, no_nccl, no_gpu,
// unsupported), 1 anything else.
int run_worker(const WorkerOptions& options);

// The environment variable through which sgpu hands rank 0's unique id to
// the other workers.
inline constexpr const char* kUniqueIdVariable = "SGPU_DOCTOR_NCCL_ID";

std::string to_hex(const unsigned char* bytes, std::size_t n);
// Throws sgpu::Error when `hex` is not 2*n hex digits.
void from_hex(const std::string& hex, unsigned char* bytes, std::size_t n);

}  // namespace sgpu::launcher::preflight
