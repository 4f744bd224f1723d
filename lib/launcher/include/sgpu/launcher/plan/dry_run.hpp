#pragma once
// `sgpu launch --dry-run`: the resolved plan of every node, shown without
// starting anything, reserving a port or creating the run directory. Values
// only known at launch are shown as placeholders (<run-id>, <free port>).
// Secrets in the environment are masked (env/secrets.hpp). Pure.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/env/gpu.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/spec/spec_load.hpp"

namespace sgpu::launcher {

struct NodePlan {
  int node_rank = 0;
  std::string host;           // "this node", a host name, "SLURM node 1"
  bool gpus_checked = false;  // against this node's inventory; remote nodes are checked at launch
  LaunchPlan plan;
};

struct DryRun {
  std::string config;  // the --config file, "" when none
  std::string backend;
  std::string gpu_bind;  // "node", "per-rank"
  std::vector<NodePlan> nodes;
  bool master_port_fixed = false;
  std::vector<Setting> settings;
  std::vector<std::string> notes;
  std::optional<LaunchPlan::EnvSync> env_sync;
  std::vector<std::string> spares;
};

// --sync-env's record, as the dry run, summary.json and the events give it.
nlohmann::ordered_json env_sync_json(const LaunchPlan::EnvSync& sync);
// One node's part in words: "built there already", "gets 2 wheels and uv (41.3 MiB)".
std::string env_sync_node_text(const LaunchPlan::EnvSync::Node& node, bool dry);

// One node as the chosen backend lays the job out (backend.hpp's
// PlannedNode is this type: the plan stays below the backends).
struct DryRunNode {
  std::string host;
  std::optional<std::vector<env::Gpu>> gpus;  // this node's; nullopt: planned with the GPUs asked for
};

struct DryRunInputs {
  std::vector<DryRunNode> nodes;
  std::string master_addr;                      // "" on one node
  std::vector<std::string> notes;               // the backend's
  std::optional<LaunchPlan::EnvSync> env_sync;  // --sync-env, per node
  std::vector<std::string> spares;              // --spares: hosts held for a lost node
  std::string backend;                          // "local", "static", "ssh", "slurm"
  env::Environment inherited;
  std::string cwd;
  std::string executable;
  std::string runs_root;
  std::string config;
  // This node's processors (--cpu-bind, --report-bindings), for the nodes
  // planned here (those with `gpus`); the others bind at launch.
  std::optional<Topology> topology;
};

// Throws sgpu::Error for what would stop the launch (no GPUs, a type mismatch...).
DryRun make_dry_run(const ResolvedSpec& resolved, const DryRunInputs& in);

std::string dry_run_text(const DryRun& dry);
std::string dry_run_json(const DryRun& dry);

}  // namespace sgpu::launcher
