#include "launch_slurm.hpp"

#include <csignal>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "backends/slurm/slurm_launch.hpp"
#include "multinode.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/outputs/outputs.hpp"
#include "sgpu/launcher/plan/plan.hpp"

namespace sgpu::app {

bool use_slurm_backend(const launcher::JobSpec& spec, const env::Environment& inherited) {
  if (spec.backend == "slurm") return true;
  if (spec.origins.count("resources.backend") > 0) return false;  // --backend local (or ssh) said so
  auto job = inherited.find("SLURM_JOB_ID");
  bool static_multi = !spec.rendezvous.endpoint.empty() || spec.rendezvous.node_rank.has_value();
  return job != inherited.end() && !job->second.empty() && !static_multi;
}

int run_slurm_launch(const launcher::JobSpec& spec, const env::Environment& inherited, const std::string& cwd) {
  const auto& r = spec.rendezvous;
  if (!r.endpoint.empty() || r.node_rank)
    throw Error(fmt::format(
        "{}: the slurm backend starts every node itself; drop --rdzv-endpoint and --node-rank (--nodes N says "
        "how many nodes)",
        where_set(spec, "resources.backend", "--backend slurm")));
  launcher::SlurmLaunch in;
  in.spec = spec;
  in.inherited = inherited;
  in.cwd = cwd;
  std::error_code ec;
  in.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec) throw Error(fmt::format("cannot find this sgpu binary (/proc/self/exe): {}", ec.message()), 1);
  in.join_timeout =
      parse_limit(r.join_timeout, where_set(spec, "rendezvous.join_timeout", "--join-timeout " + r.join_timeout));
  in.heartbeat_timeout = parse_limit(r.heartbeat_timeout, where_set(spec, "rendezvous.heartbeat_timeout",
                                                                    "--heartbeat-timeout " + r.heartbeat_timeout));
  std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<launcher::JobOutputs> outputs;
  auto result = launcher::run_slurm_job(
      in, [&](boost::asio::io_context& io, const launcher::LaunchPlan& plan) -> launcher::JobObserver& {
        launcher::check_output_options(spec, static_cast<int>(plan.ranks.size()));
        outputs = std::make_unique<launcher::JobOutputs>(io, spec, plan, inherited);
        return outputs->observer();
      });
  int code = outputs->finish(result.outcome);
  // What SLURM did is the root cause the ranks' ends only show the effect of.
  if (!result.slurm_said.empty()) fmt::print(stderr, "sgpu: {} (exit code {})\n", result.slurm_said, code);
  return code;
}

}  // namespace sgpu::app
