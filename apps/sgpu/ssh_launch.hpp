#pragma once
// `sgpu launch --backend ssh ...`: the flags for remote hosts over ssh, and
// running a job there. The work is in lib/launcher/ssh_backend.
#include <string>

#include <CLI/CLI.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/launcher/spec.hpp"

namespace sgpu::app {

void add_ssh_options(CLI::App* cmd, launcher::JobSpec& spec);

// Runs the job on the spec's ssh hosts, prints how it ended, returns sgpu's
// exit code. The timeouts are --join-timeout and --heartbeat-timeout.
int run_ssh_launch(const launcher::JobSpec& spec, const std::string& cwd, env::Seconds join_timeout,
                   env::Seconds heartbeat_timeout);

}  // namespace sgpu::app
