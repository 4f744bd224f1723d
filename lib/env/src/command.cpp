#include "sgpu/env/command.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

namespace sgpu::env {

std::vector<std::string> build_argv(const Entrypoint& entry, const std::string& python) {
  std::vector<std::string> argv;
  switch (entry.kind) {
    case Entrypoint::Kind::Script:
      // Python would read a script named "-x.py" as one of its own options.
      argv = {python, "-u", entry.target.starts_with("-") ? "./" + entry.target : entry.target};
      break;
    case Entrypoint::Kind::Module:
      argv = {python, "-u", "-m", entry.target};
      break;
    case Entrypoint::Kind::Executable:
      argv = {entry.target};
      break;
  }
  argv.insert(argv.end(), entry.args.begin(), entry.args.end());
  return argv;
}

const char* entrypoint_kind_name(Entrypoint::Kind kind) {
  switch (kind) {
    case Entrypoint::Kind::Script:
      return "script";
    case Entrypoint::Kind::Module:
      return "module";
    case Entrypoint::Kind::Executable:
      return "executable";
  }
  return "script";
}

namespace {
// torchrun options that sgpu does not accept, with what to do instead.
constexpr std::array<std::pair<std::string_view, std::string_view>, 10> kUnsupported{{
    {"rdzv-backend", "sgpu runs its own authenticated rendezvous; drop the option"},
    {"rdzv-conf", "sgpu runs its own authenticated rendezvous; drop the option"},
    {"rdzv-id", "sgpu makes a run id per launch (SGPU_RUN_ID); drop the option"},
    {"monitor-interval", "sgpu reacts to exits at once, it does not poll; drop the option"},
    {"start-method", "sgpu always starts ranks with fork+exec; drop the option"},
    {"role", "sgpu has one role per job; drop the option"},
    {"redirects", "sgpu always captures every rank's output into its run directory; drop the option"},
    {"tee", "sgpu always shows and logs every rank's output; drop the option"},
    {"local-addr", "sgpu finds each node's addresses itself; --master-addr sets MASTER_ADDR"},
    {"run-path", "give the script path directly"},
}};
}  // namespace

std::string unsupported_torchrun_option(std::string_view flag) {
  if (!flag.starts_with("--")) return {};
  std::string name(flag.substr(2));
  if (auto eq = name.find('='); eq != std::string::npos) name.resize(eq);
  std::replace(name.begin(), name.end(), '_', '-');
  for (const auto& [opt, advice] : kUnsupported) {
    if (name == opt) return "torchrun's --" + std::string(opt) + " is not supported by sgpu: " + std::string(advice);
  }
  return {};
}

std::string shell_quote(std::string_view arg) {
  bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("@%+=:,./-_").find(c) != std::string_view::npos;
  });
  if (plain) return std::string(arg);
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += "'";
  return out;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += shell_quote(a);
  }
  return out;
}

}  // namespace sgpu::env
