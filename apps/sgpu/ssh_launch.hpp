#pragma once
// `sgpu launch --backend ssh ...`: runs the job on the spec's ssh hosts and
// shows and keeps it as a one-node run. The work is in lib/launcher/ssh_backend.
#include <string>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::app {

// Returns sgpu's exit code; throws sgpu::Error for what stops the job before
// it starts (bad hosts, unreachable hosts, the rendezvous).
int run_ssh_launch(const launcher::JobSpec& spec, const env::Environment& inherited, const std::string& cwd);

}  // namespace sgpu::app
