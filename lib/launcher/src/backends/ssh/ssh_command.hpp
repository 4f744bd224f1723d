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

#include "backends/ssh/hosts.hpp"

namespace sgpu::launcher::ssh {

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

// Checks one -o value ("KEY=VALUE" or "KEY VALUE"); throws sgpu::Error naming
// `where` when it is not one.
void check_ssh_option(const std::string& option, const std::string& where);

}  // namespace sgpu::launcher::ssh
