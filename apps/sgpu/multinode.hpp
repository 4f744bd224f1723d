#pragma once
// The command-line side of multi-node runs, shared by `sgpu launch` (static
// mode) and `sgpu agent`: checking the spec's multi-node settings and running
// this node's part.
#include <optional>
#include <string>

#include "backends/static/static_launch.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/devices/devices.hpp"
#include "sgpu/launcher/job/agent.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::app {

// A limit for --join-timeout / --heartbeat-timeout ("none" is refused);
// `where` starts the error message ("--join-timeout none").
env::Seconds parse_limit(const std::string& text, const std::string& where);

// Checks the spec's [rendezvous] settings against its node count; nullopt
// for a one-node launch. Throws sgpu::Error naming the setting.
std::optional<launcher::StaticLaunch> static_launch_from(const launcher::JobSpec& spec,
                                                         const env::Environment& inherited, const std::string& cwd);

// This node's part of a static launch; returns sgpu's exit code.
int run_static(const launcher::StaticLaunch& launch, const launcher::Discovery& discovery);

// A node other than 0 (and `sgpu agent`): prints the outcome, returns the exit code.
int finish_agent(const launcher::AgentResult& result);

}  // namespace sgpu::app
