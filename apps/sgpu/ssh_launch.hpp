#pragma once
// `sgpu launch --backend ssh ...`: the flags for remote hosts over ssh, and
// running a job there. The work is in lib/launcher/ssh_backend.
#include <string>

#include <CLI/CLI.hpp>

#include "sgpu/launcher/spec.hpp"

namespace sgpu::app {

void add_ssh_options(CLI::App* cmd, launcher::JobSpec& spec);

// Runs the job on the spec's ssh hosts; prints the end the way a local
// launch does through `report`. Returns sgpu's exit code.
int run_ssh_launch(const launcher::JobSpec& spec, const std::string& cwd);

}  // namespace sgpu::app
