#include "sgpu/launcher/plan/dry_run.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "sgpu/env/command.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/secrets.hpp"

namespace sgpu::launcher {
namespace {

constexpr const char* kRunId = "<run-id>";
constexpr const char* kFreePort = "<free port, reserved at launch>";

// A remote node's GPUs are only known there; plan with the ones asked for.
std::vector<env::Gpu> assumed_gpus(const JobSpec& spec) {
  int nodes = std::max(1, spec.nodes);
  int n = spec.gpus_per_node ? *spec.gpus_per_node : spec.gpus ? *spec.gpus / nodes : 0;
  std::string type = spec.gpu_type.empty() ? "<detected at launch>" : env::normalize_gpu_type(spec.gpu_type);
  if (type == "UNKNOWN") type = spec.gpu_type;
  std::vector<env::Gpu> gpus(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    gpus[static_cast<std::size_t>(i)].index = i;
    gpus[static_cast<std::size_t>(i)].type = type;
    gpus[static_cast<std::size_t>(i)].name = "not checked: discovered on the node at launch";
  }
  return gpus;
}

std::string origin_text(const Origin& o) {
  if (o.kind == Origin::Kind::File) return fmt::format("{}:{}:{}", o.name, o.line, o.column);
  if (o.kind == Origin::Kind::Environment) return "$" + o.name;
  return o.name;
}

// A setting's value as shown: secrets masked by the variable's name ([env]),
// by what they hold (a password in a URL, as in mlflow.uri), or, in the
// entrypoint's arguments, by the option they follow ("--token x").
nlohmann::json value_json(const Setting& s) {
  if (const auto* list = std::get_if<std::vector<std::string>>(&s.value); list && s.key == "job.args")
    return env::mask_arguments(*list);
  const auto* text = std::get_if<std::string>(&s.value);
  if (text == nullptr) return std::visit([](const auto& v) { return nlohmann::json(v); }, s.value);
  auto name = s.key.starts_with("env.") ? s.key.substr(4) : s.key.substr(s.key.rfind('.') + 1);
  return env::mask_secret(name, *text);
}

std::string value_text(const Setting& s) { return value_json(s).dump(); }

std::vector<const RankPlan*> all_ranks(const DryRun& d) {
  std::vector<const RankPlan*> out;
  for (const auto& n : d.nodes)
    for (const auto& r : n.plan.ranks) out.push_back(&r);
  return out;
}

// Variables whose value differs between ranks: shown per rank, the rest once.
std::set<std::string> varying(const std::vector<const RankPlan*>& ranks) {
  std::set<std::string> names;
  const auto& first = ranks.front()->env;
  for (const auto* r : ranks) {
    for (const auto& [k, v] : r->env)
      if (auto it = first.find(k); it == first.end() || it->second != v) names.insert(k);
    for (const auto& [k, v] : first)
      if (!r->env.contains(k)) names.insert(k);
  }
  return names;
}

std::string devices_text(const LaunchPlan& plan, const RankPlan& rank) {
  if (rank.gpus.empty()) return "CPU";
  std::string out;
  for (int idx : rank.gpus)
    for (const auto& g : plan.gpus)
      if (g.index == idx)
        out += fmt::format("{}GPU {} ({}{}{})", out.empty() ? "" : ", ", idx, g.type,
                           g.name.empty() ? "" : ", " + g.name, g.pci_bus_id.empty() ? "" : ", " + g.pci_bus_id);
  return out;
}

}  // namespace

DryRun make_dry_run(const ResolvedSpec& resolved, const DryRunInputs& in) {
  const JobSpec& spec = resolved.spec;
  DryRun d;
  d.config = in.config;
  d.backend = in.backend;
  d.gpu_bind = spec.gpu_bind == GpuBind::PerRank ? "per-rank" : "node";
  d.settings = resolved.settings;
  d.notes = resolved.notes;
  d.notes.insert(d.notes.end(), in.notes.begin(), in.notes.end());
  d.env_sync = in.env_sync;
  d.spares = in.spares;
  d.master_port_fixed = spec.master_port.has_value();
  auto nodes = static_cast<int>(in.nodes.size());
  std::string master_addr = spec.rendezvous.master_addr.empty() ? in.master_addr : spec.rendezvous.master_addr;
  for (int k = 0; k < nodes; ++k) {
    const auto& planned = in.nodes[static_cast<std::size_t>(k)];
    NodePlan node;
    node.node_rank = k;
    node.host = planned.host;
    PlanInputs pi;
    pi.cwd = in.cwd;
    pi.executable = in.executable;
    pi.run_id = kRunId;
    pi.run_dir = (std::filesystem::path(in.runs_root) / kRunId).string();
    pi.master_port = spec.master_port.value_or(0);
    pi.node_rank = k;
    pi.nnodes = nodes;
    pi.master_addr = master_addr;
    if (planned.gpus) {
      pi.topology = in.topology;
      pi.inventory = *planned.gpus;
      pi.inherited = in.inherited;  // a remote rank inherits its node's environment, not ours
      node.gpus_checked = true;
    } else {
      pi.inventory = assumed_gpus(spec);
    }
    node.plan = make_plan(spec, pi);
    if (!d.master_port_fixed)
      for (auto& r : node.plan.ranks) r.env["MASTER_PORT"] = kFreePort;
    d.nodes.push_back(std::move(node));
  }
  return d;
}

std::string dry_run_text(const DryRun& d) {
  const auto& first = d.nodes.front().plan;
  auto ranks = all_ranks(d);
  std::string out = "sgpu launch --dry-run: the plan; nothing was started\n";
  auto line = [&](const char* what, const std::string& text) { out += fmt::format("  {:<10}{}\n", what, text); };
  if (!d.config.empty()) line("config", d.config);
  line("command", env::shell_join(env::mask_arguments(first.argv)));
  line("cwd", first.cwd);
  line("nodes", fmt::format("{} ({} backend)", d.nodes.size(), d.backend));
  if (!d.spares.empty())
    line("spares", fmt::format("{} (each takes a lost node's place for the next attempt)", fmt::join(d.spares, ", ")));
  line("ranks", fmt::format("{} in all, {} per node", ranks.size(), first.ranks.size()));
  if (first.gpus.empty())
    line("devices", "CPU ranks, no GPUs");
  else
    line("devices", fmt::format("one {} GPU per rank, {}", first.gpu_type,
                                d.gpu_bind == "per-rank"
                                    ? "bound per rank (each rank sees only its own GPU)"
                                    : "bound per node (every rank sees the node's GPUs; LOCAL_RANK picks one)"));
  if (first.cpu_bind != CpuBind::None || first.report_bindings)
    line("cpu bind", fmt::format("{}{}", cpu_bind_name(first.cpu_bind),
                                 first.cpu_bind == CpuBind::None
                                     ? " (ranks run on every CPU sgpu may use)"
                                     : ": CPUs and memory bound before exec; OMP_NUM_THREADS follows unless set"));
  line("timeout",
       fmt::format("{}, then SIGTERM and SIGKILL after {}",
                   first.timeout ? env::format_duration(*first.timeout) : "none", env::format_duration(first.grace)));
  if (first.hang_timeout)
    line("hang", fmt::format("no progress from any rank for {}: every rank's stack, then the job ends (124)",
                             env::format_duration(*first.hang_timeout)));
  if (first.sample_every)
    line("samples",
         fmt::format(
             "every {}: each rank's CPU, memory and step rate, the GPUs through NVML, into metrics.jsonl{}{}",
             env::format_duration(*first.sample_every),
             first.straggler_factor > 1
                 ? fmt::format("; a rank {}x below the others' step rate is named a straggler", first.straggler_factor)
                 : "",
             first.metrics_listen.empty() ? "" : fmt::format("; /metrics on http://{}", first.metrics_listen)));
  if (first.max_restarts > 0)
    line("restarts", fmt::format("up to {} after a rank fails, {} apart at first (doubling, at most 1m), all within "
                                 "the timeout",
                                 first.max_restarts, env::format_duration(first.restart_backoff)));
  line("master", fmt::format("{}:{}", first.master_addr,
                             d.master_port_fixed ? std::to_string(first.master_port) : std::string(kFreePort)));
  line("run dir", first.run_dir);
  if (!d.settings.empty()) {
    out += "\nsettings (where each value came from):\n";
    for (const auto& s : d.settings)
      out += fmt::format("  {} = {}  ({})\n", s.key, value_text(s), origin_text(s.origin));
  }
  if (d.env_sync) {
    out += fmt::format("environment: {} (Python {}, {} package{}; --sync-env)\n", d.env_sync->hash, d.env_sync->python,
                       d.env_sync->packages, d.env_sync->packages == 1 ? "" : "s");
    for (const auto& n : d.env_sync->nodes) out += fmt::format("  {}: {}\n", n.node, env_sync_node_text(n, true));
  }
  for (const auto& note : d.notes) out += fmt::format("note: {}\n", note);
  for (const auto& node : d.nodes) {
    out += fmt::format("\nnode {}: {}{}\n", node.node_rank, node.host,
                       node.gpus_checked ? "" : " (its GPUs and environment are checked there at launch)");
    for (const auto& r : node.plan.ranks)
      out += fmt::format("  rank {:<4} local {:<3} {}\n", r.place.rank, r.place.local_rank, devices_text(node.plan, r));
    bool bindings = node.plan.cpu_bind != CpuBind::None || node.plan.report_bindings;
    if (bindings && !node.plan.ranks.empty() && !node.plan.ranks.front().binding)
      out += "  bindings: made there at launch, with its own topology\n";
    else if (bindings)
      out += "  bindings:\n";
    for (const auto& r : node.plan.ranks)
      if (bindings && r.binding) out += fmt::format("    {}\n", report_line(node.plan, r));
  }
  auto differ = varying(ranks);
  out += "\nenvironment of every rank (secrets masked):\n";
  for (const auto& [k, v] : ranks.front()->env) {
    if (differ.contains(k)) continue;
    if (k == "SGPU_RAY_HELPER")  // --ray: the helper's source, read by the command above
      out += fmt::format("  {}=<sgpu's Ray node helper, {} bytes of Python>\n", k, v.size());
    else
      out += fmt::format("  {}={}\n", k, env::mask_secret(k, v));
  }
  out += "environment that differs per rank:\n";
  for (const auto* r : ranks) {
    out += fmt::format("  rank {}:", r->place.rank);
    for (const auto& [k, v] : r->env)
      if (differ.contains(k)) out += fmt::format(" {}={}", k, env::mask_secret(k, v));
    out += "\n";
  }
  return out;
}

std::string dry_run_json(const DryRun& d) {
  using nlohmann::json;
  const auto& first = d.nodes.front().plan;
  json doc;
  doc["dry_run"] = true;
  doc["config"] = d.config.empty() ? json(nullptr) : json(d.config);
  doc["backend"] = d.backend;
  doc["command"] = env::mask_arguments(first.argv);
  doc["executable"] = first.executable;
  doc["cwd"] = first.cwd;
  doc["gpu_type"] = first.gpu_type;
  doc["gpu_bind"] = d.gpu_bind;
  doc["cpu_bind"] = cpu_bind_name(first.cpu_bind);
  doc["timeout_s"] = first.timeout ? json(first.timeout->count()) : json(nullptr);
  doc["grace_s"] = first.grace.count();
  doc["hang_timeout_s"] = first.hang_timeout ? json(first.hang_timeout->count()) : json(nullptr);
  doc["sample_every_s"] = first.sample_every ? json(first.sample_every->count()) : json(nullptr);
  doc["straggler_factor"] = first.straggler_factor > 1 ? json(first.straggler_factor) : json(nullptr);
  doc["metrics_listen"] = first.metrics_listen.empty() ? json(nullptr) : json(first.metrics_listen);
  doc["max_restarts"] = first.max_restarts;
  doc["restart_backoff_s"] = first.restart_backoff.count();
  doc["master_addr"] = first.master_addr;
  doc["master_port"] = d.master_port_fixed ? json(first.master_port) : json(nullptr);
  doc["run_dir"] = first.run_dir;
  doc["nodes"] = json::array();
  doc["spares"] = d.spares;
  doc["ranks"] = json::array();
  for (const auto& node : d.nodes) {
    json ranks = json::array();
    for (const auto& r : node.plan.ranks) {
      ranks.push_back(r.place.rank);
      json devices = json::array();
      for (int idx : r.gpus)
        for (const auto& g : node.plan.gpus)
          if (g.index == idx)
            devices.push_back({{"index", g.index},
                               {"type", g.type},
                               {"name", g.name},
                               {"uuid", g.uuid},
                               {"pci_bus_id", g.pci_bus_id}});
      json environment = json::object();
      for (const auto& [k, v] : r.env) environment[k] = env::mask_secret(k, v);
      doc["ranks"].push_back(
          {{"rank", r.place.rank},
           {"local_rank", r.place.local_rank},
           {"node_rank", node.node_rank},
           {"host", node.host},
           {"devices", devices},
           {"binding", r.binding ? json(binding_json(*r.binding, node.plan.cpu_bind != CpuBind::None)) : json(nullptr)},
           {"env", environment}});
    }
    doc["nodes"].push_back(
        {{"node_rank", node.node_rank}, {"host", node.host}, {"gpus_checked", node.gpus_checked}, {"ranks", ranks}});
  }
  doc["world_size"] = doc["ranks"].size();
  doc["settings"] = json::array();
  for (const auto& s : d.settings)
    doc["settings"].push_back({{"key", s.key}, {"value", value_json(s)}, {"from", origin_text(s.origin)}});
  doc["notes"] = d.notes;
  doc["environment"] = d.env_sync ? json(env_sync_json(*d.env_sync)) : json(nullptr);
  return doc.dump(2) + "\n";
}

nlohmann::ordered_json env_sync_json(const LaunchPlan::EnvSync& sync) {
  auto nodes = nlohmann::ordered_json::array();
  for (const auto& n : sync.nodes)
    nodes.push_back({{"node", n.node},
                     {"present", n.present},
                     {"wheels_shipped", n.wheels},
                     {"uv_shipped", n.uv},
                     {"bytes_shipped", n.bytes},
                     {"interpreter", n.interpreter},
                     {"outcome", n.outcome},
                     {"seconds", n.seconds}});
  return {{"hash", sync.hash}, {"python", sync.python}, {"packages", sync.packages}, {"nodes", nodes}};
}

std::string env_sync_node_text(const LaunchPlan::EnvSync::Node& node, bool dry) {
  if (node.present) return "has the environment already: nothing shipped";
  std::string what =
      node.wheels == 0 ? std::string("no wheels") : fmt::format("{} wheel{}", node.wheels, node.wheels == 1 ? "" : "s");
  if (node.uv) what += " and uv";
  return fmt::format("{} {} ({:.1f} MiB) and build{} it", dry ? "would get" : "got", what,
                     static_cast<double>(node.bytes) / (1024.0 * 1024.0), dry ? "" : "s");
}

}  // namespace sgpu::launcher
