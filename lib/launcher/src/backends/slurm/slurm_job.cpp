#include "backends/slurm/slurm_job.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "backends/slurm/hostlist.hpp"
#include "backends/slurm/slurm_env.hpp"
#include "sgpu/env/error.hpp"

namespace sgpu::launcher::slurm {
namespace {

const std::string* find(const env::Environment& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

bool starts_with(std::string_view text, std::string_view prefix) { return text.substr(0, prefix.size()) == prefix; }

// The job id in "salloc: Granted job allocation 123" after `prefix`.
std::string job_id_after(std::string_view line, std::string_view prefix) {
  auto id = line.substr(prefix.size());
  while (!id.empty() && (id.back() == ' ' || id.back() == '\r')) id.remove_suffix(1);
  return std::string(id);
}

}  // namespace

std::optional<SlurmAllocation> slurm_allocation(const env::Environment& env) {
  const auto* job = find(env, "SLURM_JOB_ID");
  if (!job) job = find(env, "SLURM_JOBID");
  if (!job) return std::nullopt;
  if (const auto* step = find(env, "SLURM_STEP_ID"))
    throw Error(fmt::format(
        "sgpu launch runs inside SLURM step {}.{} (SLURM_STEP_ID is set): it starts its own step with one agent per "
        "node, so run it once from the batch script or the salloc shell, not under srun",
        *job, *step));
  SlurmAllocation a;
  a.job_id = *job;
  const char* list_var = "SLURM_JOB_NODELIST";
  const auto* list = find(env, list_var);
  if (!list) list = find(env, list_var = "SLURM_NODELIST");
  if (!list)
    throw Error(
        fmt::format("SLURM_JOB_ID={} is set but SLURM_JOB_NODELIST is not: sgpu cannot tell the job's nodes", *job));
  a.nodes = expand_hostlist(*list, list_var);
  if (const auto* cpus = find(env, "SLURM_JOB_CPUS_PER_NODE")) {
    a.cpus_per_node = parse_slurm_counts(*cpus, "SLURM_JOB_CPUS_PER_NODE");
    if (a.cpus_per_node.size() != a.nodes.size())
      throw Error(fmt::format("SLURM_JOB_CPUS_PER_NODE={} counts {} nodes but {}={} names {}", *cpus,
                              a.cpus_per_node.size(), list_var, *list, a.nodes.size()));
  }
  if (const auto* partition = find(env, "SLURM_JOB_PARTITION")) a.partition = *partition;
  return a;
}

std::string slurm_time_limit(env::Seconds limit) {
  auto minutes = static_cast<long long>(std::ceil(limit.count() / 60));
  return std::to_string(std::max(1LL, minutes));
}

std::string slurm_signal(int signal, env::Seconds before, env::Seconds margin) {
  auto seconds = static_cast<long long>(std::ceil((before + margin).count()));
  const char* name = sigabbrev_np(signal);
  return fmt::format("{}@{}", name != nullptr ? std::string(name) : std::to_string(signal),
                     std::clamp(seconds, 0LL, 65535LL));
}

std::optional<std::chrono::system_clock::time_point> parse_slurm_time(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
  std::tm tm{};
  std::string copy(text);
  const char* end = ::strptime(copy.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr || *end != '\0') return std::nullopt;
  tm.tm_isdst = -1;
  auto t = std::mktime(&tm);
  if (t == static_cast<std::time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(t);
}

std::vector<std::string> salloc_argv(const SlurmRequest& r) {
  std::vector<std::string> argv = {"salloc", fmt::format("--nodes={}", r.nodes), "--ntasks-per-node=1"};
  if (r.gpus_per_node) argv.push_back(fmt::format("--gpus-per-node={}", *r.gpus_per_node));
  if (r.cpus_per_node) argv.push_back(fmt::format("--cpus-per-task={}", *r.cpus_per_node));
  auto add = [&](std::string_view flag, const std::string& value) {
    if (!value.empty()) argv.push_back(fmt::format("--{}={}", flag, value));
  };
  add("partition", r.partition);
  add("account", r.account);
  add("qos", r.qos);
  add("constraint", r.constraint);
  add("reservation", r.reservation);
  if (r.time_limit) add("time", slurm_time_limit(*r.time_limit));
  add("job-name", r.job_name);
  add("exclude", r.exclude);
  add("nodelist", r.nodelist);
  add("signal", r.signal);
  if (r.no_kill) argv.emplace_back("--no-kill");
  argv.insert(argv.end(), r.extra_args.begin(), r.extra_args.end());
  argv.insert(argv.end(), {"--kill-command=TERM", "--", "/bin/sh", "-c",
                           fmt::format("read code; exit ${{code:-{}}}", kSallocHoldNoCode)});
  return argv;
}

std::vector<std::string> agent_srun_argv(const AgentStep& step, const std::vector<std::string>& agent_argv) {
  auto n = step.nodes.size();
  std::vector<std::string> argv = {
      "srun",
      fmt::format("--jobid={}", step.job_id),
      fmt::format("--nodes={}", n),
      fmt::format("--ntasks={}", n),
      "--ntasks-per-node=1",
      fmt::format("--nodelist={}", compress_hostlist(step.nodes)),
      "--distribution=block",
      // sgpu tears the job down itself and reports the root cause; SLURM
      // killing the other agents first would only blur it.
      "--kill-on-bad-exit=0",
      "--input=none",
      "--mpi=none",
      "--job-name=sgpu-agent",
  };
  if (step.cpus_per_task) argv.push_back(fmt::format("--cpus-per-task={}", *step.cpus_per_task));
  argv.insert(argv.end(), step.extra_args.begin(), step.extra_args.end());
  argv.emplace_back("--");
  argv.insert(argv.end(), agent_argv.begin(), agent_argv.end());
  return argv;
}

env::Environment agent_srun_environment(const env::Environment& inherited) {
  // srun's input variables that size tasks or hand out GPUs, CPUs or memory
  // per task or per GPU: with one agent task per node they would shrink it.
  static const char* const kStepShaping[] = {
      "SLURM_NTASKS",
      "SLURM_NPROCS",
      "SLURM_NTASKS_PER_NODE",
      "SLURM_NTASKS_PER_SOCKET",
      "SLURM_NTASKS_PER_CORE",
      "SLURM_NTASKS_PER_GPU",
      "SLURM_CPUS_PER_TASK",
      "SLURM_CPUS_PER_GPU",
      "SLURM_GPUS",
      "SLURM_GPUS_PER_TASK",
      "SLURM_GPUS_PER_SOCKET",
      "SLURM_TRES_PER_TASK",
      "SLURM_MEM_PER_GPU",
      "SLURM_DISTRIBUTION",
      "SLURM_CPU_BIND",
      "SLURM_GPU_BIND",
      "SLURM_HINT",
      "SLURM_EXACT",
      "SLURM_OVERCOMMIT",
      "SLURM_ARBITRARY_NODELIST",
  };
  env::Environment env = inherited;
  for (const char* name : kStepShaping) env.erase(name);
  return env;
}

SlurmStepIdentity slurm_step_identity(const env::Environment& env) {
  const auto* node_id = find(env, "SLURM_NODEID");
  const auto* name = find(env, "SLURMD_NODENAME");
  if (!node_id || !name || !find(env, "SLURM_STEP_ID"))
    throw Error(
        "--slurm-step: this agent is not in a SLURM job step (SLURM_STEP_ID, SLURM_NODEID or SLURMD_NODENAME is "
        "missing); sgpu launch --backend slurm starts it with srun");
  SlurmStepIdentity id;
  auto [ptr, ec] = std::from_chars(node_id->data(), node_id->data() + node_id->size(), id.node_rank);
  if (ec != std::errc() || ptr != node_id->data() + node_id->size() || id.node_rank < 0)
    throw Error(fmt::format("SLURM_NODEID={}: expected a node index", *node_id));
  id.node_name = *name;
  if (const auto* addr = find(env, "SLURM_LAUNCH_NODE_IPADDR")) id.launcher_addr = *addr;
  return id;
}

std::optional<std::string> slurm_visible_devices(const env::Environment& env) {
  if (env.count("CUDA_VISIBLE_DEVICES")) return std::nullopt;
  const char* var = "SLURM_STEP_GPUS";
  const auto* gpus = find(env, var);
  if (!gpus) gpus = find(env, var = "SLURM_JOB_GPUS");
  if (!gpus) return std::nullopt;
  std::string list;
  for (int id : parse_gpu_ids(*gpus, var)) list += (list.empty() ? "" : ",") + std::to_string(id);
  return list;
}

env::Environment slurm_rank_environment(const env::RankPlacement& p) {
  auto s = [](int v) { return std::to_string(v); };
  return {
      {"SLURM_PROCID", s(p.rank)},
      {"SLURM_LOCALID", s(p.local_rank)},
      {"SLURM_NODEID", s(p.node_rank)},
      {"SLURM_NTASKS", s(p.world_size)},
      {"SLURM_NPROCS", s(p.world_size)},
      {"SLURM_STEP_NUM_TASKS", s(p.world_size)},
      {"SLURM_NTASKS_PER_NODE", s(p.local_world_size)},
      {"SLURM_TASKS_PER_NODE", fmt::format("{}(x{})", p.local_world_size, p.nnodes)},
      {"SLURM_STEP_TASKS_PER_NODE", fmt::format("{}(x{})", p.local_world_size, p.nnodes)},
  };
}

SallocLine parse_salloc_line(std::string_view line) {
  static constexpr std::string_view kPending = "salloc: Pending job allocation ";
  static constexpr std::string_view kGranted = "salloc: Granted job allocation ";
  static constexpr std::string_view kError = "salloc: error: ";
  static constexpr std::string_view kJob = "salloc: Job ";
  static constexpr std::string_view kAllocation = "salloc: Job allocation ";
  SallocLine out;
  if (starts_with(line, kPending)) {
    out.kind = SallocLine::Kind::Pending;
    out.job_id = job_id_after(line, kPending);
  } else if (starts_with(line, kGranted)) {
    out.kind = SallocLine::Kind::Granted;
    out.job_id = job_id_after(line, kGranted);
  } else if (starts_with(line, kAllocation) && line.find(" has been revoked") != std::string_view::npos) {
    // "salloc: Job allocation 4 has been revoked."
    out.kind = SallocLine::Kind::Revoked;
    auto rest = line.substr(kAllocation.size());
    out.job_id = std::string(rest.substr(0, rest.find(' ')));
  } else if (starts_with(line, kJob) && line.find(" exceeded its time limit") != std::string_view::npos) {
    // "salloc: Job 3 has exceeded its time limit and its allocation has been revoked."
    out.kind = SallocLine::Kind::TimeLimit;
    auto rest = line.substr(kJob.size());
    out.job_id = std::string(rest.substr(0, rest.find(' ')));
  } else if (starts_with(line, kError)) {
    out.kind = SallocLine::Kind::Error;
    out.message = std::string(line.substr(kError.size()));
  }
  return out;
}

SrunLine parse_srun_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  static constexpr std::string_view kSrunError = "srun: error: ";
  static constexpr std::string_view kNodeFailure = "Node failure on ";
  static constexpr std::string_view kAborted = "srun: Job step aborted";
  SrunLine out;
  if (starts_with(line, kAborted)) {
    out.kind = SrunLine::Kind::Aborted;
    return out;
  }
  if (starts_with(line, kSrunError)) {
    auto rest = line.substr(kSrunError.size());
    if (starts_with(rest, kNodeFailure)) {
      out.kind = SrunLine::Kind::NodeFailure;
      out.node = std::string(rest.substr(kNodeFailure.size()));
      return out;
    }
    // "NODE: task N: WHAT"
    auto colon = rest.find(": task ");
    if (colon != std::string_view::npos && rest.substr(0, colon).find(' ') == std::string_view::npos) {
      auto after = rest.substr(colon + 7);
      int task = 0;
      auto [ptr, ec] = std::from_chars(after.data(), after.data() + after.size(), task);
      std::string_view tail(ptr, static_cast<std::size_t>(after.data() + after.size() - ptr));
      if (ec == std::errc() && starts_with(tail, ": ")) {
        out.kind = SrunLine::Kind::TaskEnded;
        out.node = std::string(rest.substr(0, colon));
        out.task = task;
        out.detail = std::string(tail.substr(2));
        return out;
      }
    }
    out.kind = SrunLine::Kind::Error;
    out.detail = std::string(rest);
    return out;
  }
  // slurmstepd's banner, on whichever node noticed first.
  auto stars = line.find("*** ");
  auto cancelled = line.find(" CANCELLED AT ");
  if (stars == std::string_view::npos || cancelled == std::string_view::npos || cancelled < stars) return out;
  auto on = line.find(" ON ", stars);
  if (on == std::string_view::npos || on > cancelled) return out;
  out.kind = SrunLine::Kind::Cancelled;
  out.node = std::string(line.substr(on + 4, cancelled - on - 4));
  auto due = line.find(" DUE TO ", cancelled);
  if (due != std::string_view::npos) {
    auto reason = line.substr(due + 8);
    auto end = reason.find(" ***");
    auto comma = reason.find(',');  // "DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS"
    out.detail = std::string(reason.substr(0, std::min(end, comma)));
  }
  return out;
}

std::optional<SlurmJobState> parse_squeue_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  auto bar = line.find('|');
  if (bar == std::string_view::npos || bar == 0) return std::nullopt;
  return SlurmJobState{std::string(line.substr(0, bar)), std::string(line.substr(bar + 1))};
}

}  // namespace sgpu::launcher::slurm
