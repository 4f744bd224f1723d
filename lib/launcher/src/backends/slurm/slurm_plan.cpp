// plan_slurm_job: which nodes, how many, and the allocation to ask for. Pure.
#include <algorithm>

#include <fmt/format.h>

#include "backends/host_filter.hpp"
#include "backends/slurm/hostlist.hpp"
#include "backends/slurm/slurm_launch.hpp"
#include "backends/slurm/slurm_settings.hpp"
#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace {

// --pool maps to the partition and QoS the spec names for it; an explicit
// --partition/--qos that says otherwise is a contradiction, not a silent win.
void apply_pool(const JobSpec& spec, slurm::SlurmRequest& r) {
  const auto& s = slurm::settings(spec);
  if (s.pool.empty()) return;
  auto pool_where = where_set(spec, "slurm.pool", "--pool " + s.pool);
  bool reserved = s.pool == "reserved";
  const auto& partition = reserved ? s.reserved_partition : s.on_demand_partition;
  const auto& qos = reserved ? s.reserved_qos : s.on_demand_qos;
  std::string key = reserved ? "slurm.pools.reserved" : "slurm.pools.on_demand";
  if (partition.empty() && qos.empty())
    throw Error(
        fmt::format("{}: the job spec names no partition or QoS for this pool; set {}.partition or {}.qos (the "
                    "cluster's {} partition or QoS) in the --config file",
                    pool_where, key, key, s.pool));
  auto take = [&](std::string& field, const std::string& value, const char* what) {
    if (value.empty()) return;
    if (!field.empty() && field != value)
      throw Error(fmt::format("{} means {} {} ({}.{}), but {} asks for another; drop one of them", pool_where, what,
                              value, key, what,
                              where_set(spec, fmt::format("slurm.{}", what), fmt::format("--{} {}", what, field))));
    field = value;
  };
  take(r.partition, partition, "partition");
  take(r.qos, qos, "qos");
}

// --include/--exclude name SLURM nodes ("node3@node4"); a GPU list
// ("node3:1") is not applied by this backend yet, and a part without a node
// (":1") names none. Returns the nodes named, in order.
std::vector<std::string> filter_nodes(const std::string& text, std::string_view flag) {
  std::vector<std::string> nodes;
  if (text.empty()) return nodes;
  for (const auto& f : parse_host_filter(text, flag)) {
    if (f.host.empty())
      throw Error(fmt::format("{} {}: which node? With --backend slurm every part names one: 'node3'", flag, text));
    if (!f.devices.empty())
      throw Error(
          fmt::format("{} {}: the slurm backend leaves out whole nodes ('{}'), not GPUs; give those with "
                      "CUDA_VISIBLE_DEVICES or salloc's --gpus",
                      flag, text, f.host));
    for (auto& n : slurm::expand_hostlist(f.host, flag)) nodes.push_back(std::move(n));
  }
  return nodes;
}

}  // namespace

SlurmPlan plan_slurm_job(const JobSpec& spec, const std::optional<slurm::SlurmAllocation>& allocation) {
  SlurmPlan plan;
  bool nodes_given = spec.origins.count("resources.nodes") > 0;
  auto nodes_where = where_set(spec, "resources.nodes", fmt::format("--nodes {}", spec.nodes));
  auto include = filter_nodes(spec.include, "--include");
  auto exclude = filter_nodes(spec.exclude, "--exclude");
  auto named = [](const std::vector<std::string>& list, const std::string& node) {
    return std::find(list.begin(), list.end(), node) != list.end();
  };
  if (allocation) {
    // The allocation's nodes the filters leave, in its order.
    std::vector<std::string> usable;
    for (const auto& n : allocation->nodes)
      if ((include.empty() || named(include, n)) && !named(exclude, n)) usable.push_back(n);
    for (const auto* list : {&include, &exclude})
      for (const auto& n : *list)
        if (!named(allocation->nodes, n))
          throw Error(fmt::format("{} {}: SLURM job {} has no node {} (it has {})",
                                  list == &include ? "--include" : "--exclude",
                                  list == &include ? spec.include : spec.exclude, allocation->job_id, n,
                                  slurm::compress_hostlist(allocation->nodes)));
    auto have = static_cast<int>(usable.size());
    plan.nnodes = nodes_given ? spec.nodes : have - spec.spares;
    if (spec.spares > 0 && (plan.nnodes < 1 || plan.nnodes + spec.spares > have))
      throw Error(
          fmt::format("{}: SLURM job {} has {} usable node{} ({}), and the job needs {} beside its spares; "
                      "ask for more with salloc/sbatch -N",
                      where_set(spec, "resources.spares", fmt::format("--spares {}", spec.spares)), allocation->job_id,
                      have, have == 1 ? "" : "s", slurm::compress_hostlist(usable), nodes_given ? spec.nodes : 1),
          kExitUsage);
    auto filtered = usable.size() != allocation->nodes.size();
    if (plan.nnodes > have || have == 0)
      throw Error(fmt::format("{}: SLURM job {} has {} node{} ({}){}; ask for more with salloc/sbatch -N",
                              nodes_given ? nodes_where : "--include/--exclude", allocation->job_id,
                              allocation->nodes.size(), allocation->nodes.size() == 1 ? "" : "s",
                              slurm::compress_hostlist(allocation->nodes),
                              filtered ? fmt::format(", {} left after --include/--exclude", have) : ""));
    plan.nodes.assign(usable.begin(), usable.begin() + plan.nnodes);
    plan.spare_nodes.assign(usable.begin() + plan.nnodes, usable.begin() + plan.nnodes + spec.spares);
    if (filtered) {
      std::vector<std::string> left_out;
      for (const auto& n : allocation->nodes)
        if (!named(usable, n)) left_out.push_back(n);
      plan.notes.push_back(
          fmt::format("nodes left out by --include/--exclude: {}", slurm::compress_hostlist(left_out)));
    }
  } else {
    plan.nnodes = spec.nodes;
    if (!include.empty() && static_cast<int>(include.size()) != plan.nnodes + spec.spares)
      throw Error(
          fmt::format("--include {}: a new allocation takes exactly the nodes named (salloc --nodelist), and "
                      "it names {} for {}{}; name {} or use --exclude",
                      spec.include, include.size(), nodes_where,
                      spec.spares > 0 ? fmt::format(" and --spares {}", spec.spares) : "", plan.nnodes + spec.spares));
    for (const auto& n : include)
      if (named(exclude, n))
        throw Error(fmt::format("--include {} and --exclude {} both name {}", spec.include, spec.exclude, n));
  }
  if (spec.gpus && *spec.gpus % plan.nnodes != 0)
    throw Error(fmt::format("{} does not split evenly over {} nodes; give --gpus-per-node N",
                            where_set(spec, "resources.gpus", fmt::format("--gpus {}", *spec.gpus)), plan.nnodes));
  std::optional<int> gpus_per_node = spec.gpus_per_node;
  if (spec.gpus) gpus_per_node = *spec.gpus / plan.nnodes;

  plan.spares = spec.spares;
  plan.node_spec = spec;
  plan.node_spec.nodes = plan.nnodes;  // every agent plans its own node's share of the job

  if (!allocation) {
    auto& r = plan.request;
    const auto& s = slurm::settings(spec);
    r.nodes = plan.nnodes + spec.spares;  // the spares held idle in the same allocation
    r.no_kill = spec.spares > 0;          // a failed node must not end it: a spare takes its place
    r.gpus_per_node = gpus_per_node;
    if (spec.nproc) r.cpus_per_node = *spec.nproc;  // a CPU per rank
    r.partition = s.partition;
    r.account = s.account;
    r.qos = s.qos;
    r.constraint = s.constraint;
    r.reservation = s.reservation;
    apply_pool(spec, r);
    // sgpu's own limit holds for the ranks; SLURM's covers the start-up and
    // the teardown's grace too, so SLURM never cuts sgpu's short.
    const auto& timeout = spec.timeout.limit();
    const auto& grace = spec.grace.limit();
    if (timeout) r.time_limit = *timeout + grace.value_or(env::Seconds(0)) + env::Seconds(60);
    if (spec.signal_before) {
      // SLURM's time limit is whole minutes past sgpu's deadline: its signal is told that much earlier.
      env::Seconds margin{0};
      if (r.time_limit) margin = env::Seconds(std::stod(slurm::slurm_time_limit(*r.time_limit)) * 60) - *timeout;
      r.signal = slurm::slurm_signal(spec.signal_before->signal, spec.signal_before->before, margin);
    }
    auto name = spec.entrypoint.target.substr(spec.entrypoint.target.find_last_of('/') + 1);
    r.job_name = "sgpu:" + (name.empty() ? std::string("job") : name);
    if (!exclude.empty()) r.exclude = slurm::compress_hostlist(exclude);
    if (!include.empty()) r.nodelist = slurm::compress_hostlist(include);
    r.extra_args = s.extra_args;
  } else if (!slurm::settings(spec).pool.empty() || !slurm::settings(spec).partition.empty() ||
             !slurm::settings(spec).qos.empty()) {
    // SGPU_POOL may be set for every job; inside an allocation it has no say.
    plan.notes.push_back(
        fmt::format("running inside SLURM job {}: the pool, partition and QoS settings are for new allocations and "
                    "are not used",
                    allocation->job_id));
  }
  return plan;
}

}  // namespace sgpu::launcher
