#pragma once
// The environment every rank starts with: what torchrun sets, so scripts
// written for torchrun run unchanged, plus sgpu's own SGPU_* variables.
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace sgpu::env {

using Environment = std::map<std::string, std::string>;

// Where one rank sits in the job.
struct RankPlacement {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
};

// What is the same for every rank of a run (or of one node).
struct JobEnvironment {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string run_id;
  int restart_count = 0;
  int max_restarts = 0;
  std::string gpu_type;                             // "" when no GPUs
  std::optional<std::string> cuda_visible_devices;  // nullopt: leave as inherited
  Environment extra;                                // [env] of the spec, -x flags
  int omp_threads = 1;  // OMP_NUM_THREADS unless set: 1, or the cores a rank is bound to (--cpu-bind)
  // Multi-node: the interface this node routes MASTER_ADDR through, for
  // NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME (socket_ifname.hpp); "" leaves them.
  std::string socket_ifname;
};

// Per-rank file paths (run directory layout).
struct RankFiles {
  std::string error_file;
  std::string result_file;
  // SGPU_HEARTBEAT_FILE: a rank that touches it made progress (--hang-timeout).
  std::string heartbeat_file{};
  // Where PyTorch's NCCL flight recorder dumps its trace on a watchdog
  // timeout (TORCH_NCCL_DEBUG_INFO_TEMP_FILE, a prefix it adds the rank to);
  // "" leaves the recorder as the user set it.
  std::string nccl_trace_prefix{};
};

// `inherited` is sgpu's own environment. Identity variables always win;
// tuning defaults (OMP_NUM_THREADS, TORCH_NCCL_ASYNC_ERROR_HANDLING, ...) only
// apply where neither `inherited` nor `job.extra` sets them.
Environment build_rank_env(const Environment& inherited, const JobEnvironment& job, const RankPlacement& place,
                           const RankFiles& files);

// True when build_rank_env will default OMP_NUM_THREADS (said once to the user).
bool omp_threads_defaulted(const Environment& inherited, const JobEnvironment& job);

// True for the variables build_rank_env always sets itself (RANK, MASTER_PORT,
// CUDA_VISIBLE_DEVICES, ...): a job spec's [env] may not set them.
bool is_launcher_variable(std::string_view name);

// Snapshot of this process's environ.
Environment current_environment();

}  // namespace sgpu::env
