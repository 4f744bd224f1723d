#pragma once
// --sync-env for the ssh backend: the lock made here, every node asked what
// it has (in parallel, one ssh command each, before anything starts), and
// the tar each node that lacks the environment is sent before its agent.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "backends/ssh/env_sync.hpp"
#include "backends/ssh/hosts.hpp"
#include "backends/ssh/ssh_command.hpp"
#include "sgpu/launcher/plan/plan.hpp"

namespace sgpu::launcher::ssh {

struct EnvSyncState {
  EnvLock lock;
  std::vector<NodeProbe> probes;        // by node rank
  std::vector<NodeShipment> shipments;  // by node rank
  std::uint64_t uv_bytes = 0;
  std::string wheel_cache;  // here: where the wheels are
};

// Inspects the environment (building the wheels it lacks unless `dry_run`)
// and asks every node. Throws sgpu::Error naming every node that cannot run
// it (another Python, platform, system packages) or could not be asked.
// The job's interpreter is resolved as its ranks' would be here (resolve_python).
EnvSyncState prepare_env_sync(const JobSpec& spec, const env::Environment& inherited, const std::string& cwd,
                              const std::vector<NodeAssignment>& nodes, const SshOptions& opts, bool dry_run);

// What each node had or gets, for the plan and the dry run.
LaunchPlan::EnvSync env_sync_record(const EnvSyncState& state, const std::vector<NodeAssignment>& nodes);

// The tar for each node that lacks the environment ("" for one that has it),
// made under `dir`; nodes that need the same files share one. Throws
// sgpu::Error with tar's message.
std::vector<std::string> make_env_tarballs(const EnvSyncState& state, const std::string& dir);

// --envs list|prune: every host's cached environments, asked at once. The
// text (or with `json`, one document) and the exit code: 0, or 1 when a host
// could not answer (the others still listed).
struct EnvsAnswer {
  std::string text;
  int exit_code = 0;
};
EnvsAnswer envs_command(const JobSpec& spec, const env::Environment& inherited,
                        const std::vector<NodeAssignment>& nodes, const SshOptions& opts);
// The listing as text, for the hosts that answered; `now` in seconds since the epoch. Pure.
std::string envs_text(const std::vector<std::pair<std::string, NodeEnvs>>& hosts, bool prune, long long now);

}  // namespace sgpu::launcher::ssh
