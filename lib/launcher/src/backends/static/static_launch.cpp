#include "backends/static/static_launch.hpp"

#include <boost/asio/io_context.hpp>

#include "sgpu/launcher/job/cluster_job.hpp"

namespace sgpu::launcher {

namespace {
AgentOptions agent_options(const StaticLaunch& launch) {
  AgentOptions o;
  o.launcher = launch.endpoint;
  o.node_rank = launch.node_rank;
  o.nnodes = launch.nnodes;
  o.spec = launch.spec;
  o.cwd = launch.cwd;
  o.join_timeout = launch.join_timeout;
  o.environment = launch.inherited;
  return o;
}
}  // namespace

JobOutcome run_static_host(boost::asio::io_context& io, const StaticLaunch& launch, const rendezvous::Secret& secret,
                           const RunStart& run, JobHost& host) {
  ClusterOptions options;
  options.nnodes = launch.nnodes;
  options.listen = rendezvous::Endpoint{"", launch.endpoint.port};
  options.secret = secret;
  options.join_timeout = launch.join_timeout;
  options.heartbeat_timeout = launch.heartbeat_timeout;
  options.master_addr = launch.master_addr;
  options.run = run;
  ClusterJob job(io, launch.spec, options, launch.cwd, host);

  // This node's ranks join like every other node's, over loopback.
  auto local = agent_options(launch);
  local.launcher = rendezvous::Endpoint{"127.0.0.1", job.port()};
  local.handle_signals = false;  // the ClusterJob owns them and passes them on
  Agent agent(io, local, secret);
  agent.start([](const AgentResult&) {});
  return job.run();
}

AgentResult run_static_node(const StaticLaunch& launch, const rendezvous::Secret& secret) {
  return run_agent(agent_options(launch), secret);
}

}  // namespace sgpu::launcher
