#pragma once
// `sgpu launch --ray`: one Ray node per sgpu node. Each node runs one
// process, the Ray node helper (ray_node_helper.cpp): it starts
// `ray start --block` with the command line built here, waits (on node 0)
// until every node is alive, runs the driver once with RAY_ADDRESS and exits
// with its code; on any end it stops its own Ray session and kills the
// process group `ray start` made. sgpu supervises it as the node's rank, so
// fail-fast, the timeout, signals and the exit code are the usual ones.
// Everything here is pure.
#include <string>
#include <vector>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/rendezvous/auth.hpp"

namespace sgpu::launcher {

// One sgpu node's Ray node.
struct RayNode {
  int node_rank = 0;  // 0: the head
  int nnodes = 1;
  int slots = 1;                        // --nproc CPU slots, or GPUs when `gpus`
  bool gpus = false;                    // slots are GPUs (--num-gpus), else CPUs (--num-cpus)
  std::string head_addr = "127.0.0.1";  // --node-ip-address of the head: what the other nodes reach
  int port = 0;                         // the head's GCS port (sgpu's reserved MASTER_PORT); 0: not yet
  std::string temp_dir;                 // the head's --temp-dir
  bool dashboard = false;
  bool metrics = false;  // the head writes ray_metrics_path() once a second
  // How long the head waits for every node to be alive, and a worker for
  // the head (--join-timeout, as sgpu's own rendezvous); 0: no limit.
  double wait_s = 600;
  // The head's metrics agent, metrics export and runtime-env agent ports,
  // reserved as MASTER_PORT is. Ray would pick them at random from the same
  // high range sgpu reserves the GCS port in, and refuse to start when one
  // matched it ("used by other components"). Empty: Ray picks.
  std::vector<int> agent_ports{};
};

// --ray-metrics: <run_dir>/ray/metrics.jsonl, one JSON line per node and second.
std::string ray_metrics_path(const std::string& run_dir);

// The longest --temp-dir Ray's unix sockets allow under it
// (<temp>/session_<date>_<pid>/sockets/plasma_store must fit in sun_path's 108 bytes).
inline constexpr std::size_t kRayMaxTempDir = 40;

// Where Ray keeps its session: <run_dir>/ray when that is short enough for
// Ray's unix sockets, else /tmp/sgpu-ray-<run_id> (then linked from <run_dir>/ray).
std::string ray_temp_dir(const std::string& run_dir, const std::string& run_id);

// The resource every node gets, so a task can be pinned to a node: sgpu_node_<k>.
std::string ray_node_resource(int node_rank);

// `ray start ... --block` for this node. A worker's --address and
// --node-ip-address are added by the helper, which finds the address
// that reaches the head.
std::vector<std::string> ray_start_args(const RayNode& node);

// The helper's argv: `python -c <boot> ray start ... -- <driver argv>`.
std::vector<std::string> ray_node_argv(const std::string& python, const RayNode& node,
                                       const std::vector<std::string>& driver);

// What the helper reads from its environment (and removes before the
// driver starts): its own source, the node count, the log and link paths;
// Ray's own settings (usage stats off, token authentication when a token is given).
void add_ray_env(env::Environment& rank_env, const RayNode& node, const std::string& run_dir, const std::string& token);

// The cluster's token, derived from the run's rendezvous secret: every node
// of a multi-node run gets the same one without it being sent; a one-node
// run derives it from a fresh secret.
std::string ray_token(const rendezvous::Secret& secret);

// The helper's Python source (ray_node_helper.cpp).
const char* ray_node_helper_source();

}  // namespace sgpu::launcher
