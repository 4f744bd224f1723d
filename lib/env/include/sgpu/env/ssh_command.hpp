#pragma once
// The system OpenSSH client's command line for one remote host, and the
// remote command quoted so that every argument arrives unchanged. Pure.
//
// ssh joins its arguments with spaces and hands the result to the remote
// user's login shell, so each word is quoted for a POSIX shell (sh, dash,
// bash, zsh, ksh); csh and fish parse quotes differently and are not supported
// as the remote login shell.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sgpu/env/exit_code.hpp"
#include "sgpu/env/hosts.hpp"

namespace sgpu::env {

// Every word single-quoted unless it is plainly safe; the first word is
// quoted too when a shell would read it as an assignment (A=b) or a job (%1).
std::string remote_shell_command(const std::vector<std::string>& argv);

struct SshOptions {
  std::string program = "ssh";
  std::string config_file;             // -F; "" means ~/.ssh/config
  std::string identity;                // -i; "" means ssh's default keys
  std::string user;                    // for hosts listed without user@
  std::optional<int> port;             // for hosts listed without port=
  int connect_timeout_s = 10;          // ConnectTimeout
  int alive_interval_s = 5;            // ServerAliveInterval: a silent host is
  int alive_count = 3;                 //   dead after interval x count seconds
  std::string control_path;            // ControlPath; "" turns multiplexing off
  std::string control_persist = "60";  // how long an idle master stays (seconds)
  std::vector<std::string> options;    // -o KEY=VALUE from the spec; they win over sgpu's defaults
};

// ssh [-F ...] -T -e none -o BatchMode=yes <options> <sgpu's defaults>
//     [-i ...] [-p ...] [-l ...] -- host [remote_command]
// BatchMode is forced (a password prompt would hang the job); for the other
// settings the first value wins in ssh, so the spec's -o come before sgpu's.
// `remote_command` is shell text: remote_shell_command(argv) or a script.
std::vector<std::string> ssh_argv(const SshOptions& opts, const HostEntry& host, const std::string& remote_command);

// What the remote login shell runs to start a node agent. Secrets come from
// ssh's stdin, one line per name, so no argv on either side shows them.
// The script says kReadyMarker on stdout once the connection works and the
// program was found, so the launcher can tell "ssh failed" and "sgpu is not
// installed there" (exit 127 before the marker) from the agent's own end.
// The agent is not exec'ed: the shell waits and exits with its status, so a
// killed agent shows as 128+N in ssh's exit code.
inline constexpr const char* kReadyMarker = "sgpu-ssh-ready";
// In an argument, stands for the launcher's address as the remote host sees
// it (the first field of $SSH_CONNECTION, bracketed when IPv6).
inline constexpr const char* kLauncherAddress = "{launcher}";

struct AgentBootstrap {
  std::vector<std::string> secret_names;                     // read from stdin in this order, then exported
  std::vector<std::pair<std::string, std::string>> exports;  // not secret: CUDA_VISIBLE_DEVICES=0,2
  std::string cd;                                            // change to this directory first; "" stays in $HOME
  std::vector<std::string> argv;                             // argv[0]: "sgpu" (from PATH) or a shipped binary's path
};

std::string agent_bootstrap_script(const AgentBootstrap& boot);

// How one host's ssh ended, as the launcher saw it.
struct SshExit {
  std::string step;        // "start the agent", "copy sgpu", ...
  bool last_step = false;  // the agent's step
  bool ready = false;      // the agent had said it started
  ExitStatus status;
  std::string stderr_tail;  // what ssh and the remote side last wrote to stderr
};

struct NodeFailure {
  std::string message;  // names the host and says what to do
  int exit_code = 1;    // the root cause's: ssh's 255, 127 for a missing sgpu, 128+N for a killed agent
};

// nullopt when the agent ended normally. `host` is how the user named it
// ("worker-1 (hosts:3)").
std::optional<NodeFailure> classify_ssh_exit(const std::string& host, const SshExit& exit);

// Checks one -o value ("KEY=VALUE" or "KEY VALUE"); throws sgpu::Error naming
// `where` when it is not one.
void check_ssh_option(const std::string& option, const std::string& where);

}  // namespace sgpu::env
