#pragma once
// The launcher's side of a multi-node run, for whatever starts the nodes: a
// static launch on node 0, the ssh backend, the SLURM backend. It hosts the
// authenticated rendezvous on the caller's event loop; the caller starts one
// `sgpu agent` per node its own way, then run() drives the job to its end and
// gives every node's ranks to the engine's observer (JobHost), as a one-node
// launch does:
//
//   ClusterJob job(io, spec, {.nnodes = 2, .node_names = {"a", "b"}, .run = run}, cwd, host);
//   for (int k = 0; k < 2; ++k)   // e.g. ssh NAME sgpu ARGS, environment added
//     start_agent(names[k], job.agent_args(launcher_host, k), job.agent_environment());
//   JobOutcome outcome = job.run();  // throws sgpu::Error if the rendezvous fails
//
// run() owns SIGINT/SIGTERM/SIGHUP/SIGUSR1/SIGUSR2 and passes them to every
// node. The first failure anywhere (a rank, a lost node, the timeout) stops
// every node: SIGTERM, SIGKILL after the grace. run() returns once every node
// has reported its ranks' ends (or was lost) and has been told to exit.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/job/job_host.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/job_control.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/spec/spec.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"
#include "sgpu/rendezvous/auth.hpp"
#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::launcher {

struct ClusterOptions {
  int nnodes = 1;
  // What the backend calls each node, by node rank: used in messages and
  // given to the agent as --node-name. May be empty (agents use hostnames).
  std::vector<std::string> node_names;
  rendezvous::Endpoint listen;               // host "": every interface; port 0: a free port
  std::optional<rendezvous::Secret> secret;  // nullopt: a fresh one from the OS random source
  env::Seconds join_timeout{600};
  env::Seconds heartbeat_timeout{10};
  std::string master_addr;  // --master-addr; "" lets the rendezvous choose
  // Refused peers, progress while waiting; default: "sgpu: ..." on stderr.
  std::function<void(const std::string&)> notice;
  // Called once when the run is over (every node reported or was lost, or
  // the rendezvous failed). run() returns only when the backend's own
  // processes have ended too: one that would linger (srun waiting for SLURM
  // to declare a lost node dead) is the backend's to stop from here.
  std::function<void()> on_end;
  // What only the backend knows of how an attempt ended (an ssh session's
  // code for a lost node, SLURM's time limit or scancel), asked once per
  // attempt when every node is done or lost: before the attempt is recorded,
  // before JobControl decides on a restart and before any node hears the
  // verdict, so the agents' exit code, the summary's and sgpu's are one. It
  // may learn what it needs asynchronously on the loop (a bounded wait for
  // an ssh session's end, a squeue query) and calls `settled` exactly once.
  // It may change the end's kind and `backend_code`, never an exit code.
  using EndRefiner = std::function<void(env::JobEnd& end, std::function<void()> settled)>;
  EndRefiner refine_end;
  // The run the engine made (its id and directory, which exists).
  RunStart run;
  // The scheduler's end of the allocation (SLURM's EndTime), when known:
  // --signal-before counts back from it when it comes before the timeout.
  std::optional<Clock::time_point> end_by{};
  // --sync-env: what each node had or was sent, for the job's plan (the
  // summary, the events).
  // (shared: the backend completes it as each node's build step ends,
  // before the nodes join).
  std::shared_ptr<LaunchPlan::EnvSync> env_sync{};
  // --spares: how many the backend holds, and how it starts one. A node lost
  // while a restart would follow is replaced: `replace_node` is called with
  // its node rank and name, starts an agent on a spare asking for that node
  // rank (agent_args), and returns the spare's name (or, with a space in it,
  // what it asked for while no node is known yet: "a node of a new SLURM
  // allocation"); nullopt when none is left. Unset: a lost node ends the run.
  int spares = 0;
  bool replacements = false;  // beyond its spares, it can ask for a new node (SLURM's submit mode)
  std::function<std::optional<std::string>(int node_rank, const std::string& lost)> replace_node;
};

// --join-timeout and --heartbeat-timeout from the spec, checked (a limit,
// not "none"); errors name where each was set.
struct NodeLimits {
  env::Seconds join_timeout{600};
  env::Seconds heartbeat_timeout{10};
};
NodeLimits node_limits(const JobSpec& spec);

class ClusterJob {
 public:
  // Listens at once; validates the spec's durations; asks `host` for the
  // variables every rank gets (they travel to every node with the job).
  // Throws sgpu::Error.
  ClusterJob(boost::asio::io_context& io, JobSpec spec, ClusterOptions options, std::string cwd, JobHost& host);
  ~ClusterJob();
  ClusterJob(const ClusterJob&) = delete;
  ClusterJob& operator=(const ClusterJob&) = delete;

  int port() const;
  const rendezvous::Secret& secret() const;
  const std::string& run_id() const;
  const std::string& run_dir() const;

  // The arguments after the sgpu binary that start node `node_rank`'s agent,
  // reaching the launcher at `launcher_host` (an address or name the node can
  // reach): agent --rdzv HOST:PORT --node-rank K [--node-name NAME] --join-timeout D.
  // `name`: the node's --node-name ("" : options.node_names's, if any).
  std::vector<std::string> agent_args(const std::string& launcher_host, int node_rank,
                                      const std::string& name = {}) const;
  // What to add to the agent's environment: the secret (SGPU_RDZV_SECRET).
  // Never put it on a command line.
  env::Environment agent_environment() const;

  // A backend could not start node `node_rank` or lost it (ssh exited, srun
  // failed): before the start the rendezvous ends with this message; during
  // the run the node counts as lost. Ignored once the node has reported.
  // `code` is what the node's ending means when the backend knows it (ssh's
  // 255, 128+N for an agent killed by signal N): the exit code of a run that
  // ends for this node. What explains a loss the rendezvous saw first is the
  // backend's refine_end.
  void node_failed(int node_rank, const std::string& why, std::optional<int> code = std::nullopt);

  // Drives the job to its end. Once every node has joined and the ranks
  // start, the host's observe() gets the whole job's plan (every node's
  // ranks with their host, the run directory, the rendezvous's
  // MASTER_ADDR/PORT); an sgpu::Error it throws ends the run on every node.
  JobOutcome run();

  // The job's JobControl settings from the spec (--timeout, --grace,
  // restarts, stopping, --hang-timeout) and the backend's end_by. Throws
  // sgpu::Error for a --grace of none. Pure.
  static JobControlOptions control_options(const JobSpec& spec, const ClusterOptions& options);

  // The job-wide plan the factory gets, from the nodes' placement. Pure.
  static LaunchPlan job_plan(const JobSpec& spec, const std::string& run_id, const std::string& run_dir,
                             const std::string& cwd, const std::vector<NodePlacement>& nodes,
                             const std::string& master_addr, int master_port);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgpu::launcher
