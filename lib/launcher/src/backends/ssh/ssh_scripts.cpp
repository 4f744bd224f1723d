// Remote shell scripts and the meaning of an ssh ending (ssh_scripts.hpp).
#include "backends/ssh/ssh_scripts.hpp"

#include <fmt/format.h>

#include "backends/ssh/ssh_command.hpp"
#include "sgpu/env/command.hpp"

namespace sgpu::launcher::ssh {

namespace {

// "~/x y" -> "$HOME"/'x y': the remote shell expands the home directory.
std::string home_word(const std::string& path) {
  if (path.starts_with("~/")) return "\"$HOME\"/" + env::shell_quote(path.substr(2));
  return remote_shell_command({path});
}

// A word with kLauncherAddress in it: the literal parts quoted, the address
// expanded by the remote shell.
std::string with_launcher_address(const std::string& word) {
  std::string out;
  std::string_view rest = word;
  std::string_view marker = kLauncherAddress;
  for (auto pos = rest.find(marker); pos != std::string_view::npos; pos = rest.find(marker)) {
    if (pos > 0) out += env::shell_quote(rest.substr(0, pos));
    out += "\"$sgpu_launcher\"";
    rest.remove_prefix(pos + marker.size());
  }
  if (!rest.empty()) out += env::shell_quote(rest);
  return out;
}

}  // namespace

std::string agent_bootstrap_script(const AgentBootstrap& boot) {
  std::string s;
  for (const auto& name : boot.secret_names) s += fmt::format("IFS= read -r {0} || exit 125; export {0}; ", name);
  for (const auto& [name, value] : boot.exports)
    s += fmt::format("{}={}; export {}; ", name, env::shell_quote(value), name);
  s += boot.prelude;
  s += "set -- $SSH_CONNECTION; case $1 in *:*) sgpu_launcher=\"[$1]\";; *) sgpu_launcher=$1;; esac; ";
  if (!boot.cd.empty()) s += fmt::format("cd {} || exit 1; ", home_word(boot.cd));
  if (!boot.argv.empty()) {
    const auto& program = boot.argv.front();
    s += fmt::format("command -v {} >/dev/null 2>&1 || {{ echo \"PATH=$PATH\" >&2; exit 127; }}; ", home_word(program));
    s += fmt::format("echo {}; ", kReadyMarker);
    std::string words;
    for (std::size_t i = 0; i < boot.argv.size(); ++i) {
      const auto& w = boot.argv[i];
      std::string quoted =
          w.find(kLauncherAddress) != std::string::npos ? with_launcher_address(w) : remote_shell_command({w});
      if (i == 0) quoted = home_word(w);
      words += (i ? " " : "") + quoted;
    }
    // The agent runs in the foreground on ssh's stdin (sshd signals nothing
    // when a session drops: the agent's --watch-stdin ends it at EOF), and
    // the shell waits for it: once ssh reports the exit, nothing of the
    // session is left on the host.
    s +=
        words + "; s=$?; " +
        (boot.remove_after.empty() ? std::string() : fmt::format("cd / && rm -rf {}; ", home_word(boot.remove_after))) +
        "exit $s";
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
    return NodeFailure{fmt::format("ssh to {} was killed by {}", host, env::signal_name(*st.signal)), st.shell_code()};
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
    return NodeFailure{fmt::format("the agent on {} was killed by {}", host, env::signal_name(code - 128)), code};
  return NodeFailure{fmt::format("the agent on {} exited with {}{}", host, code, with_detail(e.stderr_tail)), code};
}

std::string ship_binary_script(const std::string& path) {
  return fmt::format(
      "f={}; [ -x \"$f\" ] && exit 0; mkdir -p \"${{f%/*}}\" && t=$(mktemp \"$f.XXXXXX\") && cat > \"$t\" && "
      "chmod 755 \"$t\" && mv -f \"$t\" \"$f\"",
      home_word(path));
}

std::string unpack_script(const std::string& dir) {
  return fmt::format(
      "d={}; [ -d \"$d\" ] && exit 0; mkdir -p \"${{d%/*}}\" && t=$(mktemp -d \"$d.XXXXXX\") && "
      "tar -xzf - -C \"$t\" && {{ mv -T \"$t\" \"$d\" 2>/dev/null || rm -rf \"$t\"; }} && [ -d \"$d\" ]",
      home_word(dir));
}

}  // namespace sgpu::launcher::ssh
