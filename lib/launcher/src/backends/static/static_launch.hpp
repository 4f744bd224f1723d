#pragma once
// A static multi-node launch, as torchrun's: the same `sgpu launch --nnodes N
// --node-rank K --rdzv-endpoint HOST:PORT ...` runs on every node. Node 0
// hosts the rendezvous on PORT and runs its own ranks through an agent on the
// same loop, so its observer sees every node's ranks; the other nodes join it
// as agents with their own command line's job.
#include <functional>
#include <string>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/job/agent.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/spec/spec.hpp"
#include "sgpu/rendezvous/auth.hpp"
#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::launcher {

struct StaticLaunch {
  JobSpec spec;
  int nnodes = 2;
  int node_rank = 0;
  rendezvous::Endpoint endpoint;  // node 0's rendezvous
  std::string master_addr;        // --master-addr
  env::Seconds join_timeout{600};
  env::Seconds heartbeat_timeout{10};
  env::Environment inherited;
  std::string cwd;
};

// Node 0, hosting the engine's run. Throws sgpu::Error when the rendezvous fails.
JobOutcome run_static_host(boost::asio::io_context& io, const StaticLaunch& launch, const rendezvous::Secret& secret,
                           const RunStart& run, JobHost& host);

// Any other node: to the launcher's verdict, or to why it could not take part.
AgentResult run_static_node(const StaticLaunch& launch, const rendezvous::Secret& secret);

}  // namespace sgpu::launcher
