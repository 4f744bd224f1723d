#include "multinode.hpp"

#include <csignal>
#include <memory>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/outputs/outputs.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/rendezvous/auth.hpp"
#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::app {

env::Seconds parse_limit(const std::string& text, const std::string& where) {
  auto d = env::parse_duration(text, where);
  if (!d || d->count() <= 0) throw Error(fmt::format("{}: give a limit, e.g. 10s", where));
  return *d;
}

namespace {
// Where a setting came from, without its value, for messages that add the value themselves.
std::string subject(const launcher::JobSpec& spec, std::string_view key, const std::string& flag,
                    const std::string& value) {
  auto where = where_set(spec, key, flag);
  auto suffix = " " + value;
  if (!value.empty() && where.size() > suffix.size() && where.ends_with(suffix))
    where.resize(where.size() - suffix.size());
  return where;
}
}  // namespace

std::optional<launcher::StaticLaunch> static_launch_from(const launcher::JobSpec& spec,
                                                         const env::Environment& inherited, const std::string& cwd) {
  const auto& r = spec.rendezvous;
  auto nodes_where = where_set(spec, "resources.nodes", fmt::format("--nnodes {}", spec.nodes));
  if (spec.nodes <= 1) {
    if (r.node_rank && *r.node_rank != 0)
      throw Error(fmt::format("{}: a one-node run has only node rank 0",
                              where_set(spec, "rendezvous.node_rank", fmt::format("--node-rank {}", *r.node_rank))));
    if (!r.endpoint.empty())
      throw Error(
          fmt::format("{}: the rendezvous is for multi-node runs; give --nnodes N (N > 1) on every node, or "
                      "drop it",
                      where_set(spec, "rendezvous.endpoint", "--rdzv-endpoint " + r.endpoint)));
    return std::nullopt;
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
  launcher::StaticLaunch launch;
  launch.spec = spec;
  launch.nnodes = spec.nodes;
  launch.node_rank = *r.node_rank;
  launch.endpoint = rendezvous::parse_endpoint(
      r.endpoint, subject(spec, "rendezvous.endpoint", "--rdzv-endpoint", r.endpoint).c_str());
  launch.master_addr = r.master_addr;
  launch.join_timeout =
      parse_limit(r.join_timeout, where_set(spec, "rendezvous.join_timeout", "--join-timeout " + r.join_timeout));
  launch.heartbeat_timeout = parse_limit(r.heartbeat_timeout, where_set(spec, "rendezvous.heartbeat_timeout",
                                                                        "--heartbeat-timeout " + r.heartbeat_timeout));
  launch.inherited = inherited;
  launch.cwd = cwd;
  return launch;
}

int run_static(const launcher::StaticLaunch& launch, const launcher::Discovery& discovery) {
  const auto& spec = launch.spec;
  // This node's own mistakes, before any network.
  launcher::rank_count(spec, discovery.gpus);
  launcher::resolve_program(spec, launch.inherited, launch.cwd);
  auto secret = rendezvous::find_secret(
      launch.inherited, spec.rendezvous.secret_file,
      subject(spec, "rendezvous.secret_file", "--rdzv-secret-file", spec.rendezvous.secret_file));
  std::signal(SIGPIPE, SIG_IGN);
  if (launch.node_rank != 0) return finish_agent(launcher::run_static_node(launch, secret));
  // Node 0 shows and keeps the run as a one-node launch does, once the
  // rendezvous has said which node runs which ranks.
  std::unique_ptr<launcher::JobOutputs> outputs;
  auto outcome = launcher::run_static_host(
      launch, secret, [&](boost::asio::io_context& io, const launcher::LaunchPlan& plan) -> launcher::JobObserver& {
        launcher::check_output_options(spec, static_cast<int>(plan.ranks.size()));
        outputs = std::make_unique<launcher::JobOutputs>(io, spec, plan, launch.inherited);
        return outputs->observer();
      });
  return outputs->finish(outcome);
}

int finish_agent(const launcher::AgentResult& result) {
  if (!result.finished) throw Error(result.message, result.exit_code);
  if (result.exit_code != 0) fmt::print(stderr, "sgpu: the run ended: {}\n", result.message);
  return result.exit_code;
}

}  // namespace sgpu::app
