#pragma once
// The environment every rank starts with: what torchrun sets, so scripts
// written for torchrun run unchanged, plus sgpu's own SGPU_* variables.
#include <cstddef>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sgpu::env {

using Environment = std::map<std::string, std::string>;

// A rank's environment, shared by the copies of its plan (the outputs', the
// engine's, the rank's launch) until one of them changes it, which then
// gets its own. Each rank's map holds every inherited variable: copied
// whole, those copies were a fifth of the allocations of a launch of 8.
// Reads as the map does; operator[] and edit() write.
class RankEnvironment {
 public:
  RankEnvironment() = default;
  RankEnvironment(Environment env)  // NOLINT(google-explicit-constructor): built from, and read as, a map
      : env_(std::make_shared<Environment>(std::move(env))) {}
  RankEnvironment(std::initializer_list<Environment::value_type> entries)
      : env_(std::make_shared<Environment>(entries)) {}
  operator const Environment&() const { return map(); }  // NOLINT(google-explicit-constructor)
  const Environment& map() const { return env_ ? *env_ : none(); }
  // This copy's own map, copied first while another copy shares it.
  Environment& edit() {
    if (!env_)
      env_ = std::make_shared<Environment>();
    else if (env_.use_count() > 1)
      env_ = std::make_shared<Environment>(*env_);
    return *env_;
  }
  std::string& operator[](const std::string& name) { return edit()[name]; }
  Environment::const_iterator find(const std::string& name) const { return map().find(name); }
  const std::string& at(const std::string& name) const { return map().at(name); }
  bool contains(const std::string& name) const { return map().contains(name); }
  std::size_t count(const std::string& name) const { return map().count(name); }
  Environment::const_iterator begin() const { return map().begin(); }
  Environment::const_iterator end() const { return map().end(); }
  std::size_t size() const { return map().size(); }
  bool empty() const { return map().empty(); }

 private:
  static const Environment& none() {
    static const Environment kNone;
    return kNone;
  }
  std::shared_ptr<Environment> env_;
};

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
