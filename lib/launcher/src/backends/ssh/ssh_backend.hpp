#pragma once
// `sgpu launch --backend ssh`: picks hosts from the hostfile (or --hosts) to
// cover the job, starts `sgpu agent` on each over the system ssh client, and
// runs the job through the rendezvous (ClusterJob) as if it were local. A
// host that cannot be reached, lacks sgpu, or dies is named in the error and
// decides sgpu's exit code (ssh's 255, 127, 128+N).
#include <optional>
#include <string>
#include <vector>

#include "backends/ssh/env_ship.hpp"
#include "backends/ssh/hosts.hpp"
#include "backends/ssh/ssh_scripts.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/backend.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

// The launch's inputs as run() got them (spec: ssh::settings(spec) names the
// hosts and how to reach them; self_exe: this binary, for --ship-sgpu), and
// the rendezvous's limits, checked in check().
struct SshLaunch : LaunchContext {
  env::Seconds join_timeout{600};
  env::Seconds heartbeat_timeout{10};
  std::optional<ssh::EnvSyncState> env;  // --sync-env: the lock and what each node has
};

// The hosts chosen for the job and the ranks on each (every node runs the
// same number; pinned devices where a filter named them). Reads the hostfile.
std::vector<ssh::NodeAssignment> choose_ssh_hosts(const JobSpec& spec);
// The same, with --spares: the hosts after the job's that can each run a
// node's share, held for a node that is lost.
struct SshHosts {
  std::vector<ssh::NodeAssignment> nodes;
  std::vector<ssh::NodeAssignment> spares;
};
SshHosts choose_ssh(const JobSpec& spec);

// The outcome of the engine's `run`, once every node has ended and every ssh
// has exited; throws sgpu::Error when the job cannot start.
JobOutcome run_ssh_job(boost::asio::io_context& io, const SshLaunch& launch, const RunStart& run, JobHost& host);

// The ssh backend's registry line.
BackendInfo ssh_backend_info();

}  // namespace sgpu::launcher
