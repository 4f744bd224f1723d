#pragma once
// Where a job's ranks run. A backend is one folder under
// lib/launcher/src/backends/ and one line in its registry
// (backends/registry.cpp); the launch engine (launch.hpp) owns the run and
// drives every backend the same way:
//
//   check(ctx)              the spec fits this backend; what can be resolved
//                           before anything starts is (this node's GPUs, hosts)
//   describe(ctx)           its nodes, for --dry-run; starts nothing
//   prepare(ctx, run)       the job's plan, validated, nothing created yet
//   -- the engine makes the run directory, detaches (--detach), runs the
//      preflight on this node (ranks_here) and asks MLflow for a run --
//   run(ctx, run, host)     the job to its end: this node's ranks, or agents on
//                           other nodes through the rendezvous (ClusterJob);
//                           the engine's side is JobHost (job/job_host.hpp)
//   release(code)           what the backend holds (an allocation) goes back,
//                           once, however the run ended
//
// Job control (fail-fast, the timeout, the grace, signals) is not a
// backend's business: Supervisor and ClusterJob share one JobControl. What
// only a multi-node backend knows of how an attempt ended (an ssh session's
// code, SLURM's time limit) it gives its ClusterJob as
// ClusterOptions::refine_end, which settles the end before it is recorded
// and before any node hears the verdict; the exit code is derived from it.
#include <exception>
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
#include "sgpu/launcher/job/job_host.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/spec/spec.hpp"
#include "sgpu/launcher/spec/spec_schema.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"

namespace sgpu::launcher {

// One launch, as every backend sees it: inputs only.
struct LaunchContext {
  // The launch's one event loop: backends run their processes, timers and
  // sockets on it. The engine owns it, so it outlives the job's outputs
  // (console, status line) and what a backend holds until release().
  boost::asio::io_context* io = nullptr;
  JobSpec spec;                // resolved from every source; check() may complete it
  env::Environment inherited;  // sgpu's own environment
  std::string cwd;
  std::string self_exe;  // this sgpu binary: what agents on other nodes run
  bool dry_run = false;  // --dry-run: check() may look, never build or ship
};

// A node as --dry-run shows it: its name ("this node", "gpu-a", "node3 (SLURM
// job 42, node 1)") and this node's real GPUs when the plan is made where the
// ranks run (nullopt: planned with the GPUs asked for, checked at launch).
using PlannedNode = DryRunNode;

struct PlannedLayout {
  std::vector<PlannedNode> nodes;
  std::string master_addr;                      // "" on one node (127.0.0.1)
  std::vector<std::string> notes;               // settings the backend will not use, said once
  std::optional<LaunchPlan::EnvSync> env_sync;  // --sync-env: what each node has or would get
  std::vector<std::string> spares{};            // --spares: the hosts held for a lost node
};

// How run() ended: the job this process hosted (every rank seen by the
// observer), or this node's part of a job another node hosts.
struct BackendRun {
  std::optional<JobOutcome> hosted;
  AgentResult as_node;  // when `hosted` is empty
};

// What a backend's check() throws when the launch asked it for something
// other than a job and it has answered (--envs: the ssh hosts' cached
// environments): printed on stdout, nothing started, no run made.
struct BackendAnswer : std::exception {
  std::string text;
  int exit_code = 0;
  BackendAnswer(std::string t, int code) : text(std::move(t)), exit_code(code) {}
  const char* what() const noexcept override { return "answered by the backend"; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Throws sgpu::Error naming the setting at fault and what is valid.
  virtual void check(LaunchContext& ctx) = 0;
  virtual PlannedLayout describe(const LaunchContext& ctx) = 0;
  // The job's plan for the run the engine is about to make (`run.dir` does
  // not exist yet), validated, so that a mistake leaves nothing behind:
  // every rank when they run on this node (ranks_here); by default the plan
  // so far of a multi-node job (the run, the program; no ranks until the
  // nodes join). nullopt: this process hosts no run (a static node other
  // than 0 is part of node 0's), and the engine makes none.
  virtual std::optional<LaunchPlan> prepare(const LaunchContext& ctx, const RunStart& run);
  // `run` exists now. Throws sgpu::Error when the job cannot start (a host
  // unreachable, an allocation refused, the rendezvous failed).
  virtual BackendRun run(LaunchContext& ctx, const RunStart& run, JobHost& host) = 0;
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
  // --spares: it holds spare nodes and starts one in a lost node's place
  // (ClusterOptions::replace_node).
  bool spare_nodes = false;
};

struct BackendInfo {
  std::string_view name;       // "ssh": in messages and ARCHITECTURE.md
  std::string_view flag_name;  // what --backend calls it ("local" for static multi-node too)
  BackendCapabilities can{};
  // Its rows of the spec schema (an [ssh] table...), added to spec_keys()
  // as it is registered; the struct they fill is its own, kept in
  // JobSpec::backend_settings.
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
// fake one): its flag name and its settings table join the spec's schema,
// so a spec read after this can name them.
void register_backend(const BackendInfo& info);

// The backend for this job: --backend's, else the best offer. Throws
// sgpu::Error for a --backend no backend answers to.
const BackendInfo& choose_backend(const JobSpec& spec, const env::Environment& inherited);

// The backend called `name` (exact), or nullptr.
const BackendInfo* find_backend(std::string_view name);

}  // namespace sgpu::launcher
