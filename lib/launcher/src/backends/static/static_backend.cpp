#include "backends/static/static_backend.hpp"

#include <thread>

#include <fmt/format.h>

#include "backends/static/static_launch.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/devices/devices.hpp"
#include "sgpu/launcher/outputs/outputs.hpp"
#include "sgpu/rendezvous/auth.hpp"
#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::launcher::static_nodes {
namespace {

// Where a setting came from, without its value, for messages that add the value themselves.
std::string subject(const JobSpec& spec, std::string_view key, const std::string& flag, const std::string& value) {
  auto where = where_set(spec, key, flag);
  auto suffix = " " + value;
  if (!value.empty() && where.size() > suffix.size() && where.ends_with(suffix))
    where.resize(where.size() - suffix.size());
  return where;
}

// More than one node, or a rendezvous named (torchrun's --node-rank 0 alone is one node).
bool wants_static(const JobSpec& spec) {
  const auto& r = spec.rendezvous;
  return spec.nodes > 1 || !r.endpoint.empty() || (r.node_rank && *r.node_rank != 0);
}

// The spec's [rendezvous] settings against its node count. Throws sgpu::Error naming the setting.
StaticLaunch static_launch_from(const JobSpec& spec, const env::Environment& inherited, const std::string& cwd) {
  const auto& r = spec.rendezvous;
  auto nodes_where = where_set(spec, "resources.nodes", fmt::format("--nnodes {}", spec.nodes));
  if (spec.nodes <= 1) {
    if (r.node_rank && *r.node_rank != 0)
      throw Error(fmt::format("{}: a one-node run has only node rank 0",
                              where_set(spec, "rendezvous.node_rank", fmt::format("--node-rank {}", *r.node_rank))));
    throw Error(
        fmt::format("{}: the rendezvous is for multi-node runs; give --nnodes N (N > 1) on every node, or "
                    "drop it",
                    where_set(spec, "rendezvous.endpoint", "--rdzv-endpoint " + r.endpoint)));
  }
  if (r.endpoint.empty())
    throw Error(fmt::format("{} needs --rdzv-endpoint HOST:PORT: the rendezvous node 0 hosts, which every node reaches",
                            nodes_where));
  if (!r.node_rank)
    throw Error(fmt::format("{} needs --node-rank K (0 to {}) on each node; node 0 hosts the rendezvous", nodes_where,
                            spec.nodes - 1));
  if (*r.node_rank >= spec.nodes)
    throw Error(fmt::format("{}: must be between 0 and {} for {}",
                            where_set(spec, "rendezvous.node_rank", fmt::format("--node-rank {}", *r.node_rank)),
                            spec.nodes - 1, nodes_where));
  StaticLaunch launch;
  launch.spec = spec;
  launch.nnodes = spec.nodes;
  launch.node_rank = *r.node_rank;
  launch.endpoint = rendezvous::parse_endpoint(
      r.endpoint, subject(spec, "rendezvous.endpoint", "--rdzv-endpoint", r.endpoint).c_str());
  launch.master_addr = r.master_addr;
  auto limits = node_limits(spec);
  launch.join_timeout = limits.join_timeout;
  launch.heartbeat_timeout = limits.heartbeat_timeout;
  launch.inherited = inherited;
  launch.cwd = cwd;
  return launch;
}

class StaticBackend : public Backend {
 public:
  void check(LaunchContext& ctx) override {
    discovery_ = discover_gpus(ctx.inherited);
    resolve_nproc_mode(ctx.spec, discovery_.gpus, static_cast<int>(std::max(1U, std::thread::hardware_concurrency())));
    launch_ = static_launch_from(ctx.spec, ctx.inherited, ctx.cwd);
    // This node's own mistakes, before any network.
    rank_count(ctx.spec, discovery_.gpus);
  }

  PlannedLayout describe(const LaunchContext& ctx) override {
    PlannedLayout layout;
    for (int k = 0; k < launch_.nnodes; ++k) {
      if (k == launch_.node_rank)
        layout.nodes.push_back({"this node", discovery_.gpus});
      else
        layout.nodes.push_back({fmt::format("node {} (run sgpu launch --node-rank {} there)", k, k), std::nullopt});
    }
    layout.master_addr =
        ctx.spec.rendezvous.master_addr.empty() ? "<address of node 0>" : ctx.spec.rendezvous.master_addr;
    return layout;
  }

  // Node 0 hosts the run; every other node's ranks are part of it.
  std::optional<LaunchPlan> prepare(const LaunchContext& ctx, const RunStart& run) override {
    if (launch_.node_rank != 0) return std::nullopt;
    return Backend::prepare(ctx, run);
  }

  BackendRun run(LaunchContext& ctx, const RunStart& run, JobHost& host) override {
    const auto& spec = ctx.spec;
    resolve_program(spec, ctx.inherited, ctx.cwd);
    auto secret = rendezvous::find_secret(
        ctx.inherited, spec.rendezvous.secret_file,
        subject(spec, "rendezvous.secret_file", "--rdzv-secret-file", spec.rendezvous.secret_file));
    launch_.spec = spec;
    if (launch_.node_rank != 0) return {std::nullopt, run_static_node(launch_, secret)};
    // Node 0 shows and keeps the run as a one-node launch does, once the
    // rendezvous has said which node runs which ranks.
    return {run_static_host(*ctx.io, launch_, secret, run, host), {}};
  }

 private:
  Discovery discovery_;
  StaticLaunch launch_;
};

}  // namespace

BackendInfo info() {
  return {.name = "static",
          .flag_name = "local",
          .offer = [](const JobSpec& spec, const env::Environment&) { return wants_static(spec) ? 10 : 0; },
          .make = []() -> std::unique_ptr<Backend> { return std::make_unique<StaticBackend>(); }};
}

}  // namespace sgpu::launcher::static_nodes
