// The SLURM backend as the engine sees it: its check, its --dry-run nodes,
// its registry line; the run itself is a SlurmSession (slurm_launch.cpp).
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "backends/slurm/slurm_job.hpp"
#include "backends/slurm/slurm_keys.hpp"
#include "backends/slurm/slurm_launch.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"

namespace sgpu::launcher {

namespace {

class SlurmBackend : public Backend {
 public:
  void check(LaunchContext& ctx) override {
    const auto& spec = ctx.spec;
    const auto& r = spec.rendezvous;
    if (!r.endpoint.empty() || r.node_rank)
      throw Error(fmt::format(
          "{}: the slurm backend starts every node itself; drop --rdzv-endpoint and --node-rank (--nodes N says "
          "how many nodes)",
          where_set(spec, "resources.backend", "--backend slurm")));
    auto limits = node_limits(spec);
    in_.join_timeout = limits.join_timeout;
    in_.heartbeat_timeout = limits.heartbeat_timeout;
    allocation_ = slurm::slurm_allocation(ctx.inherited);
    plan_ = plan_slurm_job(spec, allocation_);  // the flags' mistakes, before SLURM is asked
  }

  PlannedLayout describe(const LaunchContext& ctx) override {
    PlannedLayout layout;
    for (int k = 0; k < plan_.nnodes; ++k) {
      if (allocation_ && static_cast<std::size_t>(k) < plan_.nodes.size())
        layout.nodes.push_back({fmt::format("{} (SLURM job {}, node {})", plan_.nodes[static_cast<std::size_t>(k)],
                                            allocation_->job_id, k),
                                std::nullopt});
      else
        layout.nodes.push_back({fmt::format("SLURM node {} (allocated at launch)", k), std::nullopt});
    }
    layout.master_addr = !ctx.spec.rendezvous.master_addr.empty() ? ctx.spec.rendezvous.master_addr
                         : allocation_ && !plan_.nodes.empty()    ? plan_.nodes.front()
                                                                  : "<SLURM node 0>";
    layout.notes = plan_.notes;
    if (allocation_)
      layout.spares = plan_.spare_nodes;
    else
      for (int k = 0; k < plan_.spares; ++k)
        layout.spares.push_back(fmt::format("SLURM node {} (allocated at launch)", plan_.nnodes + k));
    return layout;
  }

  BackendRun run(LaunchContext& ctx, const RunStart& run, JobHost& host) override {
    static_cast<LaunchContext&>(in_) = ctx;
    if (in_.self_exe.empty()) throw Error("cannot find this sgpu binary (/proc/self/exe)", 1);
    session_ = std::make_unique<SlurmSession>(*ctx.io, in_);
    return {session_->run(run, host), {}};
  }

  void release(int exit_code) override {
    if (session_) session_->release(exit_code);
  }

 private:
  SlurmLaunch in_;
  std::optional<slurm::SlurmAllocation> allocation_;
  SlurmPlan plan_;
  std::unique_ptr<SlurmSession> session_;
};

// Inside an allocation (SLURM_JOB_ID set) a job that names no rendezvous of its own runs on it.
int offer(const JobSpec& spec, const env::Environment& inherited) {
  auto job = inherited.find("SLURM_JOB_ID");
  bool static_multi = !spec.rendezvous.endpoint.empty() || spec.rendezvous.node_rank.has_value();
  return job != inherited.end() && !job->second.empty() && !static_multi ? 20 : 0;
}

// `sgpu agent --slurm-step`: node rank, name and the launcher's address from srun.
void configure_agent(AgentOptions& o, const env::Environment& inherited) {
  auto id = slurm::slurm_step_identity(inherited);
  // A spare's own step (--spares) runs on one node and names the node rank it takes over.
  if (!o.node_rank) o.node_rank = id.node_rank;
  if (o.node_name.empty()) o.node_name = id.node_name;
  // SLURM signals a step's tasks more than once (its step daemon, then srun
  // passing on its own): the second is no user's second Ctrl-C.
  o.repeat_signal_kills = false;
  // The address srun reached this node from is one this node reaches the launcher's host by.
  if (!id.launcher_addr.empty()) o.launcher.host = id.launcher_addr;
  if (auto devices = slurm::slurm_visible_devices(inherited)) o.environment["CUDA_VISIBLE_DEVICES"] = *devices;
  o.rank_environment = [](const env::RankPlacement& place, env::Environment& rank_env) {
    for (auto& [name, value] : slurm::slurm_rank_environment(place)) rank_env[name] = value;
  };
}

}  // namespace

BackendInfo slurm_backend_info() {
  return {.name = "slurm",
          .flag_name = "slurm",
          .can = {.spare_nodes = true},
          .keys = slurm::spec_keys,
          .offer = offer,
          .make = []() -> std::unique_ptr<Backend> { return std::make_unique<SlurmBackend>(); },
          .configure_agent = configure_agent};
}

}  // namespace sgpu::launcher
