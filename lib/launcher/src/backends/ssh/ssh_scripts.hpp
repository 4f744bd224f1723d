#pragma once
// The shell scripts sgpu runs on a remote host over ssh, and what a host's
// ssh ending means. Pure: ssh_nodes.cpp runs them (SshNodes).
//
// A path starting with "~/" is taken from the remote user's $HOME.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sgpu/env/exit_code.hpp"

namespace sgpu::launcher::ssh {

// What the remote login shell runs to start a node agent. Secrets come from
// ssh's stdin, one line per name, so no argv on either side shows them.
// The script says kReadyMarker on stdout once the connection works and the
// program was found, so the launcher can tell "ssh failed" and "sgpu is not
// installed there" (exit 127 before the marker) from the agent's own end.
// The agent is not exec'ed: the shell waits and exits with its status, so a
// killed agent shows as 128+N in ssh's exit code. The agent keeps ssh's
// stdin and is expected to end when it does (`sgpu agent --watch-stdin`):
// the launcher ends a session by closing it, and ssh's exit then means every
// process of the session has ended.
inline constexpr const char* kReadyMarker = "sgpu-ssh-ready";
// In an argument, stands for the launcher's address as the remote host sees
// it (the first field of $SSH_CONNECTION, bracketed when IPv6).
inline constexpr const char* kLauncherAddress = "{launcher}";

struct AgentBootstrap {
  std::vector<std::string> secret_names;                     // read from stdin in this order, then exported
  std::vector<std::pair<std::string, std::string>> exports;  // not secret: CUDA_VISIBLE_DEVICES=0,2
  std::string prelude;                                       // shell text run first (--sync-env's use mark)
  std::string cd;                                            // change to this directory first; "" stays in $HOME
  std::string remove_after;                                  // removed once the agent ends: the --sync copy
  std::vector<std::string> argv;                             // argv[0]: "sgpu" (from PATH) or a shipped binary's path
};

std::string agent_bootstrap_script(const AgentBootstrap& boot);

// How one host's ssh ended, as the launcher saw it.
struct SshExit {
  std::string step;        // "start the agent", "copy sgpu", ...
  bool last_step = false;  // the agent's step
  bool ready = false;      // the agent had said it started
  env::ExitStatus status;
  std::string stderr_tail;  // what ssh and the remote side last wrote to stderr
};

struct NodeFailure {
  std::string message;  // names the host and says what to do
  int exit_code = 1;    // the root cause's: ssh's 255, 127 for a missing sgpu, 128+N for a killed agent
};

// nullopt when the agent ended normally. `host` is how the user named it
// ("worker-1 (hosts:3)").
std::optional<NodeFailure> classify_ssh_exit(const std::string& host, const SshExit& exit);

// Copies stdin to `path` (a "~/" path) unless an executable is already
// there; a half-written copy is never visible under that name.
std::string ship_binary_script(const std::string& path);

// Unpacks a gzip'ed tar from stdin into `dir` (a "~/" path) unless it is
// there already; hosts that share a home directory do not collide.
std::string unpack_script(const std::string& dir);

}  // namespace sgpu::launcher::ssh
