#include "engine/launch_preflight.hpp"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"

namespace sgpu::launcher {

namespace pf = preflight;

void check_launch_preflight(const JobSpec& spec, const BackendInfo& backend) {
  if (!spec.preflight.enabled) return;
  (void)backend;                      // every backend: on one node here, on many by each node's agent
  (void)pf::preflight_request(spec);  // every [preflight] value, checked now
}

void run_launch_preflight(const LaunchContext& ctx, const std::string& run_dir, const LaunchPlan& plan) {
  if (plan.gpus.empty())
    throw Error(fmt::format(
        "{}: the preflight checks the job's GPUs, and this job runs {} CPU rank{}; ask for GPUs "
        "(--gpus N), or drop it",
        where_set(ctx.spec, "preflight.enabled", "--preflight"), plan.ranks.size(), plan.ranks.size() == 1 ? "" : "s"));
  auto request = pf::preflight_request(ctx.spec);
  request.environment = ctx.inherited;
  request.run_dir = run_dir;
  std::vector<int> indices;
  for (const auto& g : plan.gpus) indices.push_back(g.index);
  auto result = pf::preflight_gpus(indices, request);
  if (ctx.spec.preflight.only) throw pf::PreflightDone(std::move(result));
  auto report = (std::filesystem::path(run_dir) / "preflight.json").string();
  if (auto refusal = pf::launch_refusal(result, report)) throw *refusal;
  diagnostic("sgpu: {}\n", pf::preflight_headline(result));
}

}  // namespace sgpu::launcher
