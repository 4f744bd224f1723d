#pragma once
// [ssh]: the ssh backend's settings, written by its schema rows (ssh_keys.cpp)
// into JobSpec::backend_settings and read by the backend alone.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher::ssh {

struct Settings {
  static constexpr std::string_view kTable = "ssh";
  std::vector<std::string> hosts;  // "host", "host:slots", "user@host:slots"
  std::string hostfile;
  std::string user;
  std::optional<int> port;
  std::string identity;              // ssh -i
  std::string config_file;           // ssh -F
  std::vector<std::string> options;  // ssh -o KEY=VALUE
  env::Duration connect_timeout = "10s";
  int max_parallel = 32;                 // ssh sessions started at once
  std::vector<std::string> forward_env;  // -x NAME or -x NAME=value: beyond the default allowlist
  std::vector<std::string> env_files;    // --env-file F: NAME=value lines to forward
  std::string sync;                      // a directory shipped to every node
  std::vector<std::string> sync_exclude;
  bool ship_sgpu = false;                 // copy this sgpu binary to hosts without one
  bool sync_env = false;                  // replicate the job's Python environment on every node (env_sync.hpp)
  std::string envs;                       // "list" or "prune": the hosts' cached environments, nothing started
  env::Duration envs_unused_for = "30d";  // --envs prune removes what no launch used for this long
};

inline const Settings& settings(const JobSpec& spec) { return spec.backend_settings.get<Settings>(); }

}  // namespace sgpu::launcher::ssh
