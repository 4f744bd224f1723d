// The OpenSSH client's command line (ssh_command.hpp).
#include "backends/ssh/ssh_command.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"

namespace sgpu::launcher::ssh {

std::string remote_shell_command(const std::vector<std::string>& argv) {
  std::string out;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const auto& word = argv[i];
    std::string quoted = env::shell_quote(word);
    // shell_quote leaves "A=b" and "%1" bare; as the first word a shell would
    // take them as an assignment or a job, not as the program to run.
    if (i == 0 && quoted == word && (word.find('=') != std::string::npos || word.starts_with('%')))
      quoted = "'" + word + "'";
    if (!out.empty()) out += ' ';
    out += quoted;
  }
  return out;
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

}  // namespace sgpu::launcher::ssh
