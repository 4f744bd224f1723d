#pragma once
// The node agent: one per node of a multi-node run. It joins the launcher's
// rendezvous, plans this node's ranks once it knows their place (node rank,
// global rank base, MASTER_ADDR/PORT), runs them with the same Supervisor as
// a one-node launch, and streams their output, exits, error files and results
// to the launcher. It obeys the launcher's signals; when it loses the
// launcher it tears its ranks down and ends, leaving nothing behind.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/spec/spec.hpp"
#include "sgpu/rendezvous/auth.hpp"
#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::launcher {

struct AgentOptions {
  rendezvous::Endpoint launcher;  // where the rendezvous listens
  std::string node_name;          // "" means this host's name
  std::optional<int> node_rank;   // nullopt: the launcher chooses
  int nnodes = 0;                 // the run's node count as this node was told; 0: the launcher's
  // This node's own job (a static launch: every node has its command line);
  // nullopt: the job the launcher sends (`sgpu agent`).
  std::optional<JobSpec> spec;
  std::string cwd;  // with `spec`: where ranks start
  env::Seconds join_timeout{600};
  // A standalone agent reacts to its own SIGINT/SIGTERM/SIGHUP (ssh hangup,
  // scancel) by stopping its ranks and telling the launcher why. Off for the
  // agent inside the launcher's process, whose launcher owns the signals.
  bool handle_signals = true;
  // Whether a second SIGINT/SIGTERM/SIGHUP to this agent kills its ranks at
  // once (JobControlOptions::repeat_signal_kills); off where a scheduler
  // signals the agent more than once (a SLURM step).
  bool repeat_signal_kills = true;
  env::Environment environment;  // inherited by ranks (the secret is removed)
  // What the backend that started this agent adds to each rank for its
  // place (srun's agents: SLURM_PROCID... of the rank, not of the agent).
  std::function<void(const env::RankPlacement&, env::Environment&)> rank_environment;
  // Started over ssh (`sgpu agent --watch-stdin`): standard input is the ssh
  // session, and its end (the launcher closed it, or the connection or the
  // launcher is gone; sshd signals nothing) stops the ranks and ends the
  // agent with 129, as a hangup would.
  bool watch_stdin = false;
};

// How an agent ended: the launcher's verdict (Finish), or why the agent
// could not go on (refused, aborted, lost the launcher).
struct AgentResult {
  int exit_code = 0;
  std::string message;
  bool finished = false;  // true: the launcher said Finish; message is its summary
};

class Agent {
 public:
  Agent(boost::asio::io_context& io, AgentOptions options, rendezvous::Secret secret);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Connects and runs this node's part on the caller's loop; `on_done` is
  // called once, after every local rank has ended.
  void start(std::function<void(const AgentResult&)> on_done);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// `sgpu agent` and a static launch on a node other than 0: one agent on its
// own loop, to the end.
AgentResult run_agent(AgentOptions options, rendezvous::Secret secret);

// How a node other than the launcher ends: the launcher's verdict is its
// exit code (a line on stderr when it is not 0); an agent that could not
// take part throws sgpu::Error with the reason and its code.
int report_agent_result(const AgentResult& result);

}  // namespace sgpu::launcher
