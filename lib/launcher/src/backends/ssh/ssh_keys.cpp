// The [ssh] table of the job spec: the ssh backend's rows of the schema
// (spec_schema.hpp), added to the schema by the backend registry.
#include "backends/ssh/ssh_keys.hpp"

#include "backends/ssh/ssh_settings.hpp"

namespace sgpu::launcher::ssh {
namespace {
using K = ValueKind;
using S = Setting;

Settings& edit(JobSpec& spec) { return spec.backend_settings.edit<Settings>(); }

int to_int(const S& v) { return static_cast<int>(as_int(v)); }

// "--hosts a:8,b:8" and hosts = ["a:8", "b:8"] alike: a host name never holds a comma.
std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    std::size_t start = 0;
    while (start <= item.size()) {
      auto comma = std::min(item.find(',', start), item.size());
      if (comma > start) out.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return out;
}

}  // namespace

std::vector<KeyInfo> spec_keys() {
  return {
      {.path = "ssh.hosts",
       .kind = K::StringList,
       .flags = "--hosts",
       .help = "hosts: \"host\", \"host:slots\", \"user@host:slots\" (flag: a:8,b:8)",
       .apply = [](JobSpec& s, const S& v) { edit(s).hosts = split_commas(as_list(v)); }},
      {.path = "ssh.hostfile",
       .flags = "--hostfile",
       .help = "hostfile (OpenMPI/DeepSpeed \"host slots=N\" or MPICH \"host:N\")",
       .apply = [](JobSpec& s, const S& v) { edit(s).hostfile = as_string(v); }},
      // Where the filters were before every backend took them: specs that
      // still say so keep working.
      {.path = "ssh.include",
       .help = "the same as resources.include",
       .apply = [](JobSpec& s, const S& v) { s.include = as_string(v); }},
      {.path = "ssh.exclude",
       .help = "the same as resources.exclude",
       .apply = [](JobSpec& s, const S& v) { s.exclude = as_string(v); }},
      {.path = "ssh.user",
       .flags = "--ssh-user",
       .help = "login for hosts listed without user@",
       .apply = [](JobSpec& s, const S& v) { edit(s).user = as_string(v); }},
      {.path = "ssh.port",
       .kind = K::Int,
       .flags = "--ssh-port",
       .help = "port of the hosts' ssh servers (ssh -p), for hosts listed without one",
       .min = 1,
       .max = 65535,
       .apply = [](JobSpec& s, const S& v) { edit(s).port = to_int(v); }},
      {.path = "ssh.identity",
       .flags = "--ssh-identity",
       .help = "private key file (ssh -i)",
       .apply = [](JobSpec& s, const S& v) { edit(s).identity = as_string(v); }},
      {.path = "ssh.config_file",
       .flags = "--ssh-config",
       .help = "an ssh configuration file (ssh -F); ~/.ssh/config otherwise",
       .apply = [](JobSpec& s, const S& v) { edit(s).config_file = as_string(v); }},
      {.path = "ssh.options",
       .kind = K::StringList,
       .flags = "--ssh-option",
       .help = "options for ssh -o: [\"KEY=VALUE\", ...] (flag: repeat it); they win over sgpu's defaults",
       .apply = [](JobSpec& s, const S& v) { edit(s).options = as_list(v); }},
      {.path = "ssh.connect_timeout",
       .kind = K::Duration,
       .flags = "--ssh-connect-timeout",
       .help = "time to reach a host (ssh ConnectTimeout, default 10s)",
       .none_ok = false,
       .apply = [](JobSpec& s, const S& v) { edit(s).connect_timeout = env::Duration(as_string(v), v.subject()); }},
      {.path = "ssh.max_parallel",
       .kind = K::Int,
       .flags = "--ssh-parallel",
       .help = "hosts connecting at once (default 32)",
       .min = 1,
       .max = 4096,
       .apply = [](JobSpec& s, const S& v) { edit(s).max_parallel = to_int(v); }},
      {.path = "ssh.forward_env",
       .kind = K::StringList,
       .flags = "-x",
       .help = "more variables for every host: NAME (its value here) or NAME=value (flag: repeat it)",
       .apply = [](JobSpec& s, const S& v) { edit(s).forward_env = as_list(v); }},
      {.path = "ssh.env_files",
       .kind = K::StringList,
       .flags = "--env-file",
       .help = "files of NAME=value lines to forward to every host (flag: repeat it)",
       .apply = [](JobSpec& s, const S& v) { edit(s).env_files = as_list(v); }},
      {.path = "ssh.sync",
       .flags = "--sync",
       .help = "directory shipped to every node, where the job then runs",
       .apply = [](JobSpec& s, const S& v) { edit(s).sync = as_string(v); }},
      {.path = "ssh.sync_exclude",
       .kind = K::StringList,
       .flags = "--sync-exclude",
       .help = "patterns left out of ssh.sync, gitignore syntax (flag: repeat it)",
       .apply = [](JobSpec& s, const S& v) { edit(s).sync_exclude = as_list(v); }},
      {.path = "ssh.ship_sgpu",
       .kind = K::Bool,
       .flags = "--ship-sgpu",
       .help = "copy this sgpu binary to hosts that lack one",
       .apply = [](JobSpec& s, const S& v) { edit(s).ship_sgpu = as_bool(v); }},
      {.path = "ssh.sync_env",
       .kind = K::Bool,
       .flags = "--sync-env",
       .help = "replicate the job's Python environment (--python's) on every node, offline, cached by its lock",
       .apply = [](JobSpec& s, const S& v) { edit(s).sync_env = as_bool(v); }},
      {.path = "ssh.envs",
       .kind = K::Choice,
       .flags = "--envs",
       .help = "the hosts' cached --sync-env environments instead of a job: list them, or prune those unused for "
               "--envs-unused-for (never one in use)",
       .choices = {"list", "prune"},
       .apply = [](JobSpec& s, const S& v) { edit(s).envs = as_string(v); }},
      {.path = "ssh.envs_unused_for",
       .kind = K::Duration,
       .flags = "--envs-unused-for",
       .help = "--envs prune removes the environments no launch used for this long (default 30d), never one in "
               "use, and the wheels no environment left needs",
       .none_ok = false,
       .apply = [](JobSpec& s, const S& v) { edit(s).envs_unused_for = env::Duration(as_string(v), v.subject()); }},
  };
}

}  // namespace sgpu::launcher::ssh
