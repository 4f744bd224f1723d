#pragma once
// `--backend ssh`: the hosts and how to reach them (flags and the spec's
// [ssh] table). README "Remote GPUs over ssh" documents each field.
#include <optional>
#include <string>
#include <vector>

namespace sgpu::launcher {

struct SshSpec {
  std::string hostfile;              // --hostfile: OpenMPI/DeepSpeed/MPICH formats
  std::string hosts;                 // --hosts a:8,b:8
  std::string include;               // --include 'a:0,2@b'
  std::string exclude;               // --exclude b:1
  std::optional<int> gpus_per_node;  // --gpus-per-node
  std::optional<int> nnodes;         // CPU ranks (--nproc): how many hosts; default every host
  std::string user;                  // for hosts listed without user@
  std::optional<int> port;           // for hosts listed without port=
  std::string identity;              // ssh -i
  std::string config;                // ssh -F
  std::vector<std::string> options;  // ssh -o KEY=VALUE; they win over sgpu's defaults
  int max_parallel = 64;             // hosts connecting at once
  int connect_timeout_s = 10;
  std::string program = "ssh";
  bool ship_sgpu = false;                 // copy this sgpu binary to each host
  std::string sync;                       // --sync DIR
  std::vector<std::string> sync_exclude;  // --sync-exclude PATTERN
  std::vector<std::string> env_flags;     // -x NAME, -x NAME=value
  std::vector<std::string> env_files;     // --env-file F
};

}  // namespace sgpu::launcher
