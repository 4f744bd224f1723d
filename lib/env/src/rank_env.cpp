#include "sgpu/env/rank_env.hpp"

#include "sgpu/env/socket_ifname.hpp"

#include <string_view>

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace sgpu::env {
namespace {

bool is_set(const Environment& inherited, const JobEnvironment& job, const std::string& name) {
  return inherited.contains(name) || job.extra.contains(name);
}

}  // namespace

bool omp_threads_defaulted(const Environment& inherited, const JobEnvironment& job) {
  return !is_set(inherited, job, "OMP_NUM_THREADS");
}

Environment build_rank_env(const Environment& inherited, const JobEnvironment& job, const RankPlacement& place,
                           const RankFiles& files) {
  Environment env = inherited;
  for (const auto& [k, v] : job.extra) env[k] = v;

  auto set_default = [&](const std::string& name, const std::string& value) {
    if (!is_set(inherited, job, name)) env[name] = value;
  };
  set_default("OMP_NUM_THREADS", std::to_string(job.omp_threads));
  set_default("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  // Only the name torch 2.2 and later read, as torchrun sets it: given the
  // old NCCL_ASYNC_ERROR_HANDLING too, they warn on every rank. Torch older
  // than 2.2 then keeps its own default; sgpu stops the job on the first
  // failed rank whatever NCCL does.
  pin_socket_interfaces(env, job.socket_ifname);
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  if (job.cuda_visible_devices) env["CUDA_VISIBLE_DEVICES"] = *job.cuda_visible_devices;

  auto s = [](int v) { return std::to_string(v); };
  env["RANK"] = s(place.rank);
  env["LOCAL_RANK"] = s(place.local_rank);
  env["WORLD_SIZE"] = s(place.world_size);
  env["LOCAL_WORLD_SIZE"] = s(place.local_world_size);
  env["GROUP_RANK"] = s(place.node_rank);
  env["NODE_RANK"] = s(place.node_rank);
  env["GROUP_WORLD_SIZE"] = s(place.nnodes);
  env["NNODES"] = s(place.nnodes);
  env["ROLE_RANK"] = s(place.rank);
  env["ROLE_NAME"] = "default";
  env["ROLE_WORLD_SIZE"] = s(place.world_size);
  env["MASTER_ADDR"] = job.master_addr;
  env["MASTER_PORT"] = s(job.master_port);
  env["TORCHELASTIC_RUN_ID"] = job.run_id;
  env["TORCHELASTIC_RESTART_COUNT"] = s(job.restart_count);
  env["TORCHELASTIC_MAX_RESTARTS"] = s(job.max_restarts);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  env["TORCHELASTIC_ERROR_FILE"] = files.error_file;
  env["SGPU_RUN_ID"] = job.run_id;
  env["SGPU_GPU_TYPE"] = job.gpu_type;
  env["SGPU_RESULT_FILE"] = files.result_file;
  if (!files.heartbeat_file.empty()) env["SGPU_HEARTBEAT_FILE"] = files.heartbeat_file;
  // PyTorch's NCCL flight recorder (torch 2.3 and later): the last
  // collectives kept, and dumped into the rank's directory when NCCL's
  // watchdog fires, unless the user chose otherwise. Older torch ignores them.
  if (!files.nccl_trace_prefix.empty() && !is_set(inherited, job, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")) {
    set_default("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000");
    set_default("TORCH_NCCL_DUMP_ON_TIMEOUT", "1");
    env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] = files.nccl_trace_prefix;
  }
  return env;
}

bool is_launcher_variable(std::string_view name) {
  static constexpr std::string_view kNames[] = {"RANK",
                                                "LOCAL_RANK",
                                                "WORLD_SIZE",
                                                "LOCAL_WORLD_SIZE",
                                                "GROUP_RANK",
                                                "NODE_RANK",
                                                "GROUP_WORLD_SIZE",
                                                "NNODES",
                                                "ROLE_RANK",
                                                "ROLE_NAME",
                                                "ROLE_WORLD_SIZE",
                                                "MASTER_ADDR",
                                                "MASTER_PORT",
                                                "TORCHELASTIC_RUN_ID",
                                                "TORCHELASTIC_RESTART_COUNT",
                                                "TORCHELASTIC_MAX_RESTARTS",
                                                "TORCHELASTIC_USE_AGENT_STORE",
                                                "TORCHELASTIC_ERROR_FILE",
                                                "SGPU_RUN_ID",
                                                "SGPU_GPU_TYPE",
                                                "SGPU_RESULT_FILE",
                                                "SGPU_HEARTBEAT_FILE",
                                                "CUDA_DEVICE_ORDER",
                                                "CUDA_VISIBLE_DEVICES"};
  for (auto n : kNames)
    if (n == name) return true;
  return false;
}

Environment current_environment() {
  Environment env;
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    std::string_view entry(*p);
    auto eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(entry.substr(0, eq)), std::string(entry.substr(eq + 1)));
  }
  return env;
}

}  // namespace sgpu::env
