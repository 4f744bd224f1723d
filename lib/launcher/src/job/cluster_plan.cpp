// What a ClusterJob plans without the network: the rendezvous's limits from
// the spec, and the job-wide plan from the nodes' placement. Pure.
#include <algorithm>
#include <filesystem>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/runs/run_state.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

NodeLimits node_limits(const JobSpec& spec) {
  const auto& r = spec.rendezvous;
  return {
      r.join_timeout.required(where_set(spec, "rendezvous.join_timeout", "--join-timeout " + r.join_timeout.text())),
      r.heartbeat_timeout.required(
          where_set(spec, "rendezvous.heartbeat_timeout", "--heartbeat-timeout " + r.heartbeat_timeout.text()))};
}

LaunchPlan ClusterJob::job_plan(const JobSpec& spec, const std::string& run_id, const std::string& run_dir,
                                const std::string& cwd, const std::vector<NodePlacement>& nodes,
                                const std::string& master_addr, int master_port) {
  LaunchPlan plan;
  plan.run_id = run_id;
  plan.run_dir = run_dir;
  plan.cwd = cwd;
  // Each node resolves the program on its own PATH; the plan shows the name asked for.
  plan.executable = program_name(spec);
  plan.argv = env::build_argv(spec.entrypoint, plan.executable);
  plan.gpu_type = spec.gpu_type;
  plan.master_addr = master_addr;
  plan.master_port = master_port;
  plan.timeout = spec.timeout.limit();
  if (const auto& g = spec.grace.limit()) plan.grace = *g;
  int world = 0;
  for (const auto& n : nodes) world += n.ranks;
  auto nnodes = static_cast<int>(nodes.size());
  for (const auto& n : nodes) {
    for (int local = 0; local < n.ranks; ++local) {
      RankPlan rank;
      int global = n.first_rank + local;
      rank.place = {global, local, world, n.ranks, n.node_rank, nnodes};
      rank.host = n.host;
      auto dir = fs::path(run_dir) / "ranks" / std::to_string(global);
      rank.files.error_file = (dir / "error.json").string();
      rank.files.result_file = (dir / "result").string();
      plan.ranks.push_back(std::move(rank));
    }
  }
  std::sort(plan.ranks.begin(), plan.ranks.end(),
            [](const RankPlan& a, const RankPlan& b) { return a.place.rank < b.place.rank; });
  return plan;
}

JobControlOptions ClusterJob::control_options(const JobSpec& spec, const ClusterOptions& options) {
  auto restarts = restart_policy(spec);
  JobControlOptions control{spec.timeout.limit(), spec.grace.required("--grace none: the grace period"), true,
                            restarts.max_restarts, restarts.backoff};
  control.stop_signal = spec.stop_signal;
  control.signal_before = spec.signal_before;
  control.end_by = options.end_by;
  control.hang_timeout = spec.hang_timeout.limit();
  control.cancel_marker = (fs::path(options.run.dir) / kRunCancelFile).string();
  return control;
}

}  // namespace sgpu::launcher
