#include "sgpu/launcher/plan/plan.hpp"

#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/env/restart.hpp"
#include "sgpu/launcher/plan/ray.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

int node_slots(const JobSpec& spec, const std::vector<env::Gpu>& inventory) {
  if ((spec.gpus || spec.gpus_per_node) && spec.nproc)
    throw Error(
        "--gpus and --nproc exclude each other: --gpus N starts one rank per GPU, "
        "--nproc N starts N CPU ranks; give one of them");
  if (spec.gpus_per_node) return *spec.gpus_per_node;
  if (spec.gpus) {
    if (*spec.gpus < 1) throw Error(fmt::format("--gpus {}: must be at least 1", *spec.gpus));
    return *spec.gpus / std::max(1, spec.nodes);
  }
  if (spec.nproc) {
    if (*spec.nproc < 1 || *spec.nproc > 4096)
      throw Error(fmt::format("--nproc {}: must be between 1 and 4096", *spec.nproc));
    return *spec.nproc;
  }
  int visible = 0;
  for (const auto& g : inventory) visible += g.visible ? 1 : 0;
  return visible > 0 ? visible : 1;
}

int rank_count(const JobSpec& spec, const std::vector<env::Gpu>& inventory) {
  int slots = node_slots(spec, inventory);
  return spec.ray ? 1 : slots;  // --ray: one Ray node per node, with the node's slots as its resources
}

void resolve_nproc_mode(JobSpec& spec, const std::vector<env::Gpu>& inventory, int cpus) {
  if (spec.nproc_mode.empty()) return;
  int visible = 0;
  for (const auto& g : inventory) visible += g.visible ? 1 : 0;
  if (spec.nproc_mode == "gpu" && visible == 0)
    throw Error(fmt::format("{}: this node has no visible GPUs; give a number of CPU ranks",
                            where_set(spec, "resources.nproc", "--nproc gpu")));
  if (spec.nproc_mode == "gpu" || (spec.nproc_mode == "auto" && visible > 0))
    spec.gpus = visible * spec.nodes;
  else
    spec.nproc = cpus;
  spec.nproc_mode.clear();
}

RestartPolicy restart_policy(const JobSpec& spec) {
  if (spec.ray && spec.max_restarts > 0)
    throw Error(fmt::format("{}: --ray does not restart the Ray cluster; drop it",
                            where_set(spec, "job.max_restarts", fmt::format("--max-restarts {}", spec.max_restarts))));
  if (spec.max_restarts < 0) throw Error(fmt::format("--max-restarts {}: must be 0 or more", spec.max_restarts));
  const auto& backoff = spec.restart_backoff.limit();
  if (!backoff) throw Error("--restart-backoff none: give a wait, e.g. 1s");
  if (*backoff > env::kMaxRestartBackoff)
    throw Error(fmt::format("{0}: at most {1}s (the wait doubles after each restart, up to {1}s); give {1}s or less",
                            where_set(spec, "job.restart_backoff", "--restart-backoff " + spec.restart_backoff.text()),
                            env::kMaxRestartBackoff.count()));
  return {spec.max_restarts, *backoff};
}

bool needs_topology(const JobSpec& spec) { return spec.cpu_bind != CpuBind::None || spec.report_bindings; }

const RankBinding* applied_binding(const LaunchPlan& plan, const RankPlan& rank) {
  return plan.cpu_bind != CpuBind::None && rank.binding ? &*rank.binding : nullptr;
}

std::string report_line(const LaunchPlan& plan, const RankPlan& rank) {
  if (!rank.binding) return {};
  std::optional<int> gpu;
  if (!rank.gpus.empty()) gpu = rank.gpus.front();
  return binding_line(rank.place.rank, gpu, *rank.binding, plan.cpu_bind != CpuBind::None);
}

namespace {

// Each rank's binding on this node, or none without a topology.
std::vector<std::optional<RankBinding>> bindings_of(const JobSpec& spec, const PlanInputs& in,
                                                    const std::vector<env::Gpu>& gpus, int ranks) {
  std::vector<std::optional<RankBinding>> out(static_cast<std::size_t>(ranks));
  if (!in.topology) return out;
  std::vector<int> rank_numa(static_cast<std::size_t>(ranks), -1);
  for (std::size_t r = 0; r < rank_numa.size() && r < gpus.size() && !spec.ray; ++r)
    rank_numa[r] = gpus[r].numa_node >= 0 ? gpus[r].numa_node : numa_node_of(*in.topology, gpus[r].local_cpus);
  auto where = where_set(spec, "resources.cpu_bind", fmt::format("--cpu-bind {}", cpu_bind_name(spec.cpu_bind)));
  auto planned = plan_bindings(spec.cpu_bind, *in.topology, rank_numa, where);
  for (std::size_t r = 0; r < out.size(); ++r) out[r] = std::move(planned[r]);
  return out;
}

}  // namespace

LaunchPlan make_plan(const JobSpec& spec, const PlanInputs& in) {
  LaunchPlan plan;
  int slots = node_slots(spec, in.inventory);
  int n = rank_count(spec, in.inventory);
  int nodes = in.nnodes > 0 ? in.nnodes : std::max(1, spec.nodes);
  bool use_gpus = spec.gpus || spec.gpus_per_node ||
                  (!spec.nproc &&
                   std::any_of(in.inventory.begin(), in.inventory.end(), [](const env::Gpu& g) { return g.visible; }));
  if (!use_gpus && !spec.gpu_type.empty())
    throw Error(fmt::format("{} needs --gpus N: with --nproc the ranks run on CPUs",
                            where_set(spec, "resources.gpu_type", "--gpu-type " + spec.gpu_type)));
  if (use_gpus) {
    std::string count_where = spec.gpus_per_node ? where_set(spec, "resources.gpus_per_node", "")
                              : spec.gpus        ? where_set(spec, "resources.gpus", "")
                                                 : std::string();
    plan.gpus =
        env::select_gpus(in.inventory, slots, spec.gpu_type, count_where, where_set(spec, "resources.gpu_type", ""));
    plan.gpu_type = plan.gpus.front().type;
  }
  if (spec.master_port && (*spec.master_port < 1 || *spec.master_port > 65535))
    throw Error(fmt::format("--master-port {}: must be between 1 and 65535", *spec.master_port));
  plan.timeout = spec.timeout.limit();
  plan.grace = spec.grace.required("--grace none: the grace period");
  plan.hang_timeout = spec.hang_timeout.limit();
  plan.sample_every = spec.sample_every.limit();
  plan.straggler_factor = spec.straggler_factor;
  if (spec.metrics_port) plan.metrics_listen = fmt::format("{}:{}", spec.metrics_addr, *spec.metrics_port);
  plan.stop_signal = spec.stop_signal;
  plan.signal_before = spec.signal_before;
  if (spec.ray && spec.entrypoint.kind == env::Entrypoint::Kind::Executable)
    throw Error(
        "--ray runs the entrypoint as the Ray driver with the job's Python interpreter: drop --no-python and give a "
        "script or -m module");
  auto restarts = restart_policy(spec);
  plan.max_restarts = restarts.max_restarts;
  plan.restart_backoff = restarts.backoff;

  plan.run_id = in.run_id;
  plan.run_dir = in.run_dir;
  plan.executable = in.executable;
  plan.cwd = in.cwd;
  plan.master_port = in.master_port;
  plan.argv = env::build_argv(spec.entrypoint, in.executable);

  env::JobEnvironment job;
  if (!in.master_addr.empty())
    job.master_addr = in.master_addr;
  else if (!spec.rendezvous.master_addr.empty())
    job.master_addr = spec.rendezvous.master_addr;
  job.master_port = in.master_port;
  job.restart_count = in.restart_count;
  job.max_restarts = spec.max_restarts;
  job.run_id = in.run_id;
  job.gpu_type = plan.gpu_type;
  job.extra = spec.env;
  job.socket_ifname = in.socket_ifname;
  plan.master_addr = job.master_addr;
  plan.omp_defaulted = env::omp_threads_defaulted(in.inherited, job);

  plan.cpu_bind = spec.cpu_bind;
  plan.report_bindings = spec.report_bindings;
  auto bindings = bindings_of(spec, in, plan.gpus, n);

  std::string node_devices;
  for (const auto& g : plan.gpus) node_devices += (node_devices.empty() ? "" : ",") + std::to_string(g.index);

  for (int r = 0; r < n; ++r) {
    RankPlan rank;
    int global = in.rank_base.value_or(in.node_rank * n) + r;
    rank.place = {global, r, in.world_size.value_or(n * nodes), n, in.node_rank, nodes};
    if (!plan.gpus.empty()) {
      const auto& mine = plan.gpus[static_cast<std::size_t>(r)];
      rank.gpus = {mine.index};
      job.cuda_visible_devices =
          spec.gpu_bind == GpuBind::PerRank && !spec.ray ? std::to_string(mine.index) : node_devices;
    }
    auto dir = fs::path(plan.run_dir) / "ranks" / std::to_string(global);
    rank.files.error_file = (dir / "error.json").string();
    rank.files.result_file = (dir / "result").string();
    rank.files.heartbeat_file = (dir / "heartbeat").string();
    rank.files.nccl_trace_prefix = (dir / "nccl_trace_rank_").string();
    rank.binding = std::move(bindings[static_cast<std::size_t>(r)]);
    // OpenMP's threads fill the rank's cores, one each.
    job.omp_threads = rank.binding && spec.cpu_bind != CpuBind::None ? std::max(1, rank.binding->cores) : 1;
    rank.env = env::build_rank_env(in.inherited, job, rank.place, rank.files);
    plan.ranks.push_back(std::move(rank));
  }
  if (spec.ray) {
    RayNode node;
    node.node_rank = in.node_rank;
    node.nnodes = nodes;
    node.slots = slots;
    node.gpus = !plan.gpus.empty();
    node.head_addr = job.master_addr;
    node.port = in.master_port;
    node.agent_ports = in.ray_ports;
    node.temp_dir = ray_temp_dir(plan.run_dir, plan.run_id);
    node.dashboard = spec.ray_dashboard;
    node.metrics = spec.ray_metrics;
    const auto& wait = spec.rendezvous.join_timeout.limit();
    node.wait_s = wait ? wait->count() : 0;
    add_ray_env(plan.ranks.front().env.edit(), node, plan.run_dir, in.ray_token);
    plan.argv = ray_node_argv(plan.argv.front(), node, plan.argv);
  }
  return plan;
}

namespace {

std::string find_on_path(const std::string& name, const env::Environment& environment) {
  auto it = environment.find("PATH");
  std::string path = it == environment.end() ? "/usr/local/bin:/usr/bin:/bin" : it->second;
  std::stringstream ss(path);
  std::string dir;
  std::string first_non_exec;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) dir = ".";
    auto candidate = fs::path(dir) / name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (::access(candidate.c_str(), X_OK) == 0) return fs::absolute(candidate).string();
    if (first_non_exec.empty()) first_non_exec = candidate.string();
  }
  if (!first_non_exec.empty())
    throw Error(fmt::format("{}: found {} on PATH but it is not executable", name, first_non_exec), kExitNotExecutable);
  return {};
}

std::string resolve_executable(const std::string& name, const std::string& cwd, const env::Environment& environment,
                               const std::string& what) {
  if (name.find('/') == std::string::npos) {
    auto found = find_on_path(name, environment);
    if (found.empty()) throw Error(fmt::format("{} '{}' not found on PATH", what, name), kExitNotFound);
    return found;
  }
  auto p = fs::path(name).is_absolute() ? fs::path(name) : fs::path(cwd) / name;
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) throw Error(fmt::format("{} '{}': no such file", what, name), kExitNotFound);
  if (!S_ISREG(st.st_mode) || ::access(p.c_str(), X_OK) != 0)
    throw Error(fmt::format("{} '{}' is not an executable file", what, name), kExitNotExecutable);
  return p.lexically_normal().string();
}

}  // namespace

std::string resolve_python(const JobSpec& spec, const env::Environment& environment, const std::string& cwd) {
  std::string python = spec.python;
  std::string source = "--python";
  auto from_env = environment.find("SGPU_PYTHON");
  bool env_set = from_env != environment.end() && !from_env->second.empty();
  // job.python also comes from SGPU_PYTHON (the spec's environment layer):
  // the message names the variable when that is where the value came from.
  if (!python.empty() && env_set && python == from_env->second) source = "SGPU_PYTHON";
  if (python.empty()) {
    if (env_set) {
      python = from_env->second;
      source = "SGPU_PYTHON";
    } else {
      python = "python3";
      source = "the default";
    }
  }
  try {
    return resolve_executable(python, cwd, environment, "Python interpreter");
  } catch (const Error& e) {
    throw Error(fmt::format("{} (from {}); pass --python PATH or set SGPU_PYTHON", e.what(), source), e.exit_code());
  }
}

std::string resolve_program(const JobSpec& spec, const env::Environment& environment, const std::string& cwd) {
  using Kind = env::Entrypoint::Kind;
  if (spec.entrypoint.kind == Kind::Executable)
    return resolve_executable(spec.entrypoint.target, cwd, environment, "executable");
  auto resolved = resolve_python(spec, environment, cwd);
  if (spec.entrypoint.kind == Kind::Script) {
    auto script = fs::path(spec.entrypoint.target);
    if (!script.is_absolute()) script = fs::path(cwd) / script;
    struct stat st {};
    if (::stat(script.c_str(), &st) != 0)
      throw Error(fmt::format("script '{}': no such file (looked in {}); to run a program that is not a Python "
                              "script, use --no-python",
                              spec.entrypoint.target, cwd),
                  kExitNotFound);
    if (::access(script.c_str(), R_OK) != 0)
      throw Error(fmt::format("script '{}' is not readable", spec.entrypoint.target), kExitNotExecutable);
  }
  return resolved;
}

std::string program_name(const JobSpec& spec) {
  if (spec.entrypoint.kind == env::Entrypoint::Kind::Executable) return spec.entrypoint.target;
  return spec.python.empty() ? std::string("python3") : spec.python;
}

}  // namespace sgpu::launcher
