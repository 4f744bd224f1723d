#pragma once
// `sgpu launch --backend slurm`. Inside an allocation (salloc's shell, an
// sbatch script) the job runs on the allocation's nodes; outside one, sgpu
// asks SLURM for one (SallocHold), says while it is pending and why, and
// releases it at the end however the run ends. Either way one srun step
// starts `sgpu agent --slurm-step` on every node (node 0 = the allocation's
// first node, GPUs as SLURM gave them) and the run goes through the
// rendezvous (ClusterJob) as any multi-node run does: same output, same
// teardown, the root cause's exit code. What SLURM did (scancel, its time
// limit, a node failure) is said too, and SLURM's time limit exits 124.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/slurm/slurm_job.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/backend.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

// The launch's inputs as run() got them (spec: slurm::settings(spec),
// spec.nodes; self_exe: what the agents run, a path every node sees), and
// the rendezvous's limits, checked in check().
struct SlurmLaunch : LaunchContext {
  env::Seconds join_timeout{600};
  env::Seconds heartbeat_timeout{10};
  std::function<void(const std::string&)> notice;  // "sgpu: ..." lines; default: stderr
};

// Where the job runs and what each node runs: pure, for the checks and tests.
struct SlurmPlan {
  int nnodes = 1;
  std::vector<std::string> nodes;        // inside an allocation: the nodes used, node 0 first
  int spares = 0;                        // --spares: nodes beyond `nnodes` held for a lost one
  std::vector<std::string> spare_nodes;  // inside an allocation: those nodes
  JobSpec node_spec;                     // what every agent runs
  slurm::SlurmRequest request;           // a new allocation's (outside one)
  std::vector<std::string> notes;        // settings that had no effect, said once
};
// `allocation`: the one sgpu runs in, if any. Throws sgpu::Error naming the
// flag (or spec key) at fault.
SlurmPlan plan_slurm_job(const JobSpec& spec, const std::optional<slurm::SlurmAllocation>& allocation);

// One launch through SLURM: the allocation it runs in (or asks for), the
// agents' srun step, and what SLURM did to the job.
class SlurmSession {
 public:
  // `io`: the launch's loop; it must outlive the session.
  SlurmSession(boost::asio::io_context& io, SlurmLaunch launch);
  ~SlurmSession();
  SlurmSession(const SlurmSession&) = delete;
  SlurmSession& operator=(const SlurmSession&) = delete;

  // Runs the job to its end in the engine's `run`, through `host` (as
  // ClusterJob does). SLURM's
  // time limit, scancel or a preemption is the job's end, whatever the ranks
  // did as SLURM stopped them (settled before any node hears the verdict).
  // Throws sgpu::Error when no run could start (allocation refused,
  // rendezvous failed).
  JobOutcome run(const RunStart& run, JobHost& host);
  // A new allocation ends with sgpu's exit code; one sgpu runs in is kept.
  void release(int exit_code);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The SLURM backend's registry line.
BackendInfo slurm_backend_info();

}  // namespace sgpu::launcher
