// The OpenSSH client's command line (ssh_command.hpp).
#include "sgpu/env/ssh_command.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"

namespace sgpu::env {

std::string remote_shell_command(const std::vector<std::string>& argv) {
  std::string out;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const auto& word = argv[i];
    std::string quoted = shell_quote(word);
    // shell_quote leaves "A=b" and "%1" bare; as the first word a shell would
    // take them as an assignment or a job, not as the program to run.
    if (i == 0 && quoted == word && (word.find('=') != std::string::npos || word.starts_with('%')))
      quoted = "'" + word + "'";
    if (!out.empty()) out += ' ';
    out += quoted;
  }
  return out;
}

namespace {

// A word with kLauncherAddress in it: the literal parts quoted, the address
// expanded by the remote shell.
std::string with_launcher_address(const std::string& word) {
  std::string out;
  std::string_view rest = word;
  std::string_view marker = kLauncherAddress;
  for (auto pos = rest.find(marker); pos != std::string_view::npos; pos = rest.find(marker)) {
    if (pos > 0) out += shell_quote(rest.substr(0, pos));
    out += "\"$sgpu_launcher\"";
    rest.remove_prefix(pos + marker.size());
  }
  if (!rest.empty()) out += shell_quote(rest);
  return out;
}

}  // namespace

std::string agent_bootstrap_script(const AgentBootstrap& boot) {
  std::string s;
  for (const auto& name : boot.secret_names) s += fmt::format("IFS= read -r {0} || exit 125; export {0}; ", name);
  for (const auto& [name, value] : boot.exports) s += fmt::format("{}={}; export {}; ", name, shell_quote(value), name);
  s += "set -- $SSH_CONNECTION; case $1 in *:*) sgpu_launcher=\"[$1]\";; *) sgpu_launcher=$1;; esac; ";
  if (!boot.cd.empty()) s += fmt::format("cd {} || exit 1; ", shell_quote(boot.cd));
  if (!boot.argv.empty()) {
    const auto& program = boot.argv.front();
    s += fmt::format("command -v {} >/dev/null 2>&1 || {{ echo \"PATH=$PATH\" >&2; exit 127; }}; ",
                     shell_quote(program));
    s += fmt::format("echo {}; ", kReadyMarker);
    std::string words;
    for (std::size_t i = 0; i < boot.argv.size(); ++i) {
      const auto& w = boot.argv[i];
      std::string quoted =
          w.find(kLauncherAddress) != std::string::npos ? with_launcher_address(w) : remote_shell_command({w});
      if (i == 0) quoted = remote_shell_command({w});
      words += (i ? " " : "") + quoted;
    }
    s += words + "; exit $?";
  }
  return s;
}

namespace {

std::string last_line(const std::string& text, std::string_view prefix = "") {
  std::string found;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    auto line = text.substr(start, nl - start);
    if (!line.empty() && line.starts_with(prefix)) found = line;
    start = nl + 1;
  }
  return found;
}

std::string with_detail(const std::string& text) {
  auto line = last_line(text);
  return line.empty() ? "" : ": " + line;
}

}  // namespace

std::optional<NodeFailure> classify_ssh_exit(const std::string& host, const SshExit& e) {
  const auto& st = e.status;
  if (st.signal)
    return NodeFailure{fmt::format("ssh to {} was killed by {}", host, signal_name(*st.signal)), st.shell_code()};
  int code = st.code.value_or(1);
  if (!e.last_step)
    return NodeFailure{fmt::format("{} on {} failed ({}){}", e.step, host, st.describe(), with_detail(e.stderr_tail)),
                       code};
  if (!e.ready) {
    if (code == 255)
      return NodeFailure{fmt::format("cannot reach {} over ssh{}", host, with_detail(e.stderr_tail)), 255};
    if (code == 127) {
      auto path = last_line(e.stderr_tail, "PATH=");
      return NodeFailure{fmt::format("sgpu is not installed on {}: its ssh sessions find no 'sgpu' on the PATH{}; "
                                     "install it there, or pass --ship-sgpu to copy this one",
                                     host, path.empty() ? "" : " (" + path + ")"),
                         127};
    }
    if (code == 125) return NodeFailure{fmt::format("{}: ssh's input ended before the run secret was read", host), 1};
    return NodeFailure{
        fmt::format("starting the agent on {} failed ({}){}", host, st.describe(), with_detail(e.stderr_tail)), code};
  }
  if (code == 0) return std::nullopt;
  if (code == 255)
    return NodeFailure{fmt::format("lost the ssh connection to {}{}", host, with_detail(e.stderr_tail)), 255};
  if (code > 128 && code < 128 + 65)
    return NodeFailure{fmt::format("the agent on {} was killed by {}", host, signal_name(code - 128)), code};
  return NodeFailure{fmt::format("the agent on {} exited with {}{}", host, code, with_detail(e.stderr_tail)), code};
}

void check_ssh_option(const std::string& option, const std::string& where) {
  auto sep = option.find_first_of("= ");
  bool ok = sep != std::string::npos && sep > 0 && sep + 1 < option.size() &&
            std::all_of(option.begin(), option.begin() + static_cast<std::ptrdiff_t>(sep),
                        [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
  if (!ok)
    throw Error(
        fmt::format("{}: '{}' is not an ssh option; write KEY=VALUE as for ssh -o, e.g. "
                    "StrictHostKeyChecking=accept-new",
                    where, option));
}

std::vector<std::string> ssh_argv(const SshOptions& opts, const HostEntry& host, const std::string& remote_command) {
  std::vector<std::string> argv{opts.program};
  if (!opts.config_file.empty()) argv.insert(argv.end(), {"-F", opts.config_file});
  // No tty (the agent speaks a protocol on stdin/stdout), no escape character
  // (a "~." in that stream must not end the session).
  argv.insert(argv.end(), {"-T", "-e", "none", "-o", "BatchMode=yes"});
  for (const auto& o : opts.options) argv.insert(argv.end(), {"-o", o});
  argv.insert(argv.end(), {"-o", fmt::format("ConnectTimeout={}", opts.connect_timeout_s)});
  argv.insert(argv.end(), {"-o", fmt::format("ServerAliveInterval={}", opts.alive_interval_s)});
  argv.insert(argv.end(), {"-o", fmt::format("ServerAliveCountMax={}", opts.alive_count)});
  if (!opts.control_path.empty()) {
    argv.insert(argv.end(), {"-o", "ControlMaster=auto", "-o", "ControlPath=" + opts.control_path});
    argv.insert(argv.end(), {"-o", "ControlPersist=" + opts.control_persist});
  }
  if (!opts.identity.empty()) argv.insert(argv.end(), {"-i", opts.identity});
  auto port = host.port ? host.port : opts.port;
  if (port) argv.insert(argv.end(), {"-p", std::to_string(*port)});
  const auto& user = host.user.empty() ? opts.user : host.user;
  if (!user.empty()) argv.insert(argv.end(), {"-l", user});
  // "--" so that no host name can be read as an option, whatever the parser let through.
  argv.insert(argv.end(), {"--", host.host});
  if (!remote_command.empty()) argv.push_back(remote_command);
  return argv;
}

}  // namespace sgpu::env
