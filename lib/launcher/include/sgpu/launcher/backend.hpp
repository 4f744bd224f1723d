#pragma once
// Where a job's ranks run. A backend is one folder under
// lib/launcher/src/backends/ and one line in its registry
// (backends/registry.cpp); the launch engine (launch.hpp) drives every
// backend the same way:
//
//   check(ctx)         the spec fits this backend; what can be resolved
//                      before anything starts is (this node's GPUs, hosts)
//   describe(ctx)      its nodes, for --dry-run; starts nothing
//   run(ctx, observe)  the job to its end: this node's ranks, or agents on
//                      other nodes through the rendezvous (ClusterJob)
//   release(code)      what the backend holds (an allocation) goes back,
//                      once, however the run ended
//
// Job control (fail-fast, the timeout, the grace, signals) is not a
// backend's business: Supervisor and ClusterJob share one JobControl. What
// only a multi-node backend knows of how an attempt ended (an ssh session's
// code, SLURM's time limit) it gives its ClusterJob as
// ClusterOptions::refine_end, which settles the end before it is recorded
// and before any node hears the verdict; the exit code is derived from it.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/gpu.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/job/agent.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/spec/spec.hpp"
#include "sgpu/launcher/spec/spec_schema.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"

namespace sgpu::launcher {

// One launch, as every backend sees it.
struct LaunchContext {
  // The launch's one event loop: backends run their processes, timers and
  // sockets on it. The engine owns it, so it outlives the job's outputs
  // (console, status line) and what a backend holds until release().
  boost::asio::io_context* io = nullptr;
  JobSpec spec;                // resolved from every source; check() may complete it
  env::Environment inherited;  // sgpu's own environment
  std::string cwd;
  std::string self_exe;  // this sgpu binary: what agents on other nodes run
  // Set by the backend once it has created the run directory, so a run that
  // fails to start still leaves its summary there.
  std::string run_dir;
  std::string run_id;
  // Called by a backend once its run directory exists and before anything
  // asynchronous starts (`--detach` continues in a child from there).
  std::function<void(const LaunchContext&)> run_dir_made;
  // Called by a backend with the job's plan once its run directory exists,
  // before its ranks start: the steps that come first (the preflight), and
  // the start of those that go on beside the backend's own preparations
  // (MLflow's run being created).
  std::function<void(LaunchContext&, const LaunchPlan&)> before_start;
  // Called by the backend after before_start, just before its first rank
  // starts: waits for what before_start began, and returns the variables
  // every rank gets on top of the spec's (MLflow's run): the backend adds
  // them to spec.env, so later attempts get them too.
  std::function<env::Environment(LaunchContext&)> ranks_env;
  // Set by the engine; a backend calls it with how to take every rank's
  // stack once its job is placed, and with nullptr once the job is over, on
  // the loop (`sgpu stacks` asks through the run's control socket).
  std::function<void(StacksTaker)> offer_stacks;
};

// ClusterOptions::engine for a backend whose nodes join a ClusterJob: the
// engine's steps (ctx.before_start, then ctx.ranks_env), whose variables then
// travel to every node, and ctx.offer_stacks.
inline EngineHooks cluster_engine_hooks(LaunchContext& ctx) {
  EngineHooks hooks;
  hooks.offer_stacks = ctx.offer_stacks;
  if (!ctx.before_start && !ctx.ranks_env) return hooks;
  hooks.before_start = [&ctx](const LaunchPlan& plan) {
    ctx.run_id = plan.run_id;
    ctx.run_dir = plan.run_dir;
    if (ctx.before_start) ctx.before_start(ctx, plan);
    auto added = ctx.ranks_env ? ctx.ranks_env(ctx) : env::Environment{};
    for (const auto& [name, value] : added) ctx.spec.env[name] = value;
    return added;
  };
  return hooks;
}

// A node as --dry-run shows it: its name ("this node", "gpu-a", "node3 (SLURM
// job 42, node 1)") and this node's real GPUs when the plan is made where the
// ranks run (nullopt: planned with the GPUs asked for, checked at launch).
using PlannedNode = DryRunNode;

struct PlannedLayout {
  std::vector<PlannedNode> nodes;
  std::string master_addr;         // "" on one node (127.0.0.1)
  std::vector<std::string> notes;  // settings the backend will not use, said once
};

// How run() ended: the job this process hosted (every rank seen by the
// observer), or this node's part of a job another node hosts.
struct BackendRun {
  std::optional<JobOutcome> hosted;
  AgentResult as_node;  // when `hosted` is empty
};

// Called once, when the job's ranks are placed: the whole job's plan. It
// returns the observer that sees every rank (console, logs, report).
using ObserverFactory = std::function<JobObserver&(boost::asio::io_context&, const LaunchPlan&)>;

class Backend {
 public:
  virtual ~Backend() = default;
  // Throws sgpu::Error naming the setting at fault and what is valid.
  virtual void check(LaunchContext& ctx) = 0;
  virtual PlannedLayout describe(const LaunchContext& ctx) = 0;
  // Throws sgpu::Error when the job cannot start (a host unreachable, an
  // allocation refused, the rendezvous failed).
  virtual BackendRun run(LaunchContext& ctx, const ObserverFactory& observe) = 0;
  virtual void release(int /*exit_code*/) {}
};

// What a backend can do, declared, so the engine asks this rather than its name.
struct BackendCapabilities {
  // Its ranks run under this process's own Supervisor, on this node: the
  // engine runs --preflight on this node's GPUs itself. Otherwise each
  // node's agent checks its own and the ClusterJob judges them all.
  bool ranks_here = false;
  // --detach: once the run directory exists the run goes on in a new
  // session and the command returns with the run id.
  bool detaches = false;
};

struct BackendInfo {
  std::string_view name;       // "ssh": in messages and ARCHITECTURE.md
  std::string_view flag_name;  // what --backend calls it ("local" for static multi-node too)
  BackendCapabilities can{};
  // Its rows of the spec schema (an [ssh] table...), merged into spec_keys().
  std::vector<KeyInfo> (*keys)() = nullptr;
  // How strongly it wants a job whose --backend was not given, or named
  // its flag_name: the highest offer wins, 0 declines (SLURM offers itself
  // inside an allocation).
  int (*offer)(const JobSpec& spec, const env::Environment& inherited) = nullptr;
  std::unique_ptr<Backend> (*make)() = nullptr;
  // `sgpu agent --<flag_name>-step` (a flag each such backend adds): an
  // agent this backend's scheduler started learns its place from the
  // scheduler's environment.
  void (*configure_agent)(AgentOptions& options, const env::Environment& inherited) = nullptr;
};

// Every backend, in registry order.
const std::vector<BackendInfo>& backends();

// Adds a backend after the built-in ones (tests drive the engine with a
// fake one). Its keys only count if it is added before the first spec is read.
void register_backend(const BackendInfo& info);

// The backend for this job: --backend's, else the best offer. Throws
// sgpu::Error for a --backend no backend answers to.
const BackendInfo& choose_backend(const JobSpec& spec, const env::Environment& inherited);

// The backend called `name` (exact), or nullptr.
const BackendInfo* find_backend(std::string_view name);

}  // namespace sgpu::launcher
