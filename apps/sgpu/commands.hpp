#pragma once
// One function per subcommand: each adds itself to the CLI and returns the
// callback that runs it and yields sgpu's exit code.
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace sgpu::app {

// The words after a standalone "--" on the command line, if there was one:
// CLI11 stops there, and the launch command decides whose "--" it was.
using DashTail = std::optional<std::vector<std::string>>;
using Command = std::function<int(const DashTail&)>;

Command add_launch_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_agent_command(CLI::App& app);
Command add_doctor_command(CLI::App& app);
// sgpu completion bash|zsh|fish, generated from `app` as it stands when run.
Command add_completion_command(CLI::App& app);
// sgpu manual: the sgpu(1) man page, generated from `app` and the README's exit codes.
Command add_manual_command(CLI::App& app);
// runs, status, logs, wait, cancel, stacks, prune (cmd_runs.cpp), top (cmd_top.cpp), by name.
inline constexpr std::array<std::string_view, 8> kRunCommandNames = {"runs",   "status", "logs",  "wait",
                                                                     "cancel", "stacks", "prune", "top"};
Command add_top(CLI::App& app);
std::vector<std::pair<std::string, Command>> add_run_commands(CLI::App& app);

}  // namespace sgpu::app
