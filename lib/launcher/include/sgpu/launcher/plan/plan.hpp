#pragma once
// Turns a JobSpec into the exact ranks to start on this node: who gets which
// GPU, each rank's full environment, the command and the limits. make_plan is
// pure; resolve_program does the file-system look-ups it needs.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/gpu.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/plan/binding.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

struct RankPlan {
  env::RankPlacement place;
  std::string host;       // the node it runs on, in a multi-node run; "" on one node
  std::vector<int> gpus;  // GPU indices this rank is meant to use
  env::RankFiles files;
  env::RankEnvironment env;
  // Its CPUs and NUMA node (--cpu-bind); with none, the whole set, unbound
  // (for --report-bindings). nullopt: no topology was read for this node.
  std::optional<RankBinding> binding;
};

struct LaunchPlan {
  std::string run_id;
  std::string run_dir;
  std::string executable;  // absolute path of argv[0]
  std::vector<std::string> argv;
  std::string cwd;
  std::vector<RankPlan> ranks;
  std::vector<env::Gpu> gpus;  // the job's GPUs, empty for CPU ranks
  std::string gpu_type;
  std::string master_addr;
  int master_port = 0;
  std::optional<env::Seconds> timeout;
  env::Seconds grace{30};
  std::optional<env::Seconds> hang_timeout;  // --hang-timeout; nullopt: off
  std::optional<env::Seconds> sample_every;  // --sample-every; nullopt: off
  double straggler_factor = 0;               // --straggler-factor; 0: off
  std::string metrics_listen;                // --metrics-port's "addr:port"; "" none
  int stop_signal = 15;                      // SIGTERM
  std::optional<env::SignalBefore> signal_before{};
  int max_restarts = 0;
  env::Seconds restart_backoff{1};
  bool omp_defaulted = false;
  CpuBind cpu_bind = CpuBind::None;  // ranks with a binding are bound to it before exec unless none
  bool report_bindings = false;
  // Several nodes: each one's way to MASTER_ADDR as the reachability check
  // before the start found it (the ranks' NCCL/GLOO_SOCKET_IFNAME unless set).
  struct NodeRoute {
    std::string node;
    std::string interface;  // "" unknown
    double connect_ms = 0;  // node 0: its listen
  };
  std::vector<NodeRoute> routes;
  // --sync-env: the job's Python environment, as each node had it or got it
  // before its agent started.
  struct EnvSync {
    std::string hash;    // the lock's: 16 hex digits
    std::string python;  // "3.11.7"
    int packages = 0;    // replicated: the environment's own
    struct Node {
      std::string node;
      bool present = false;     // built there already: nothing shipped
      int wheels = 0;           // shipped
      bool uv = false;          // uv shipped
      std::uint64_t bytes = 0;  // shipped
      std::string interpreter;  // the node's copy's python
      // "present" (built before), "built" (by this launch), "found" (built
      // by another launch while this one waited for it), "shipped" (not heard of yet)
      std::string outcome;
      double seconds = 0;  // shipping and building
    };
    std::vector<Node> nodes;
  };
  std::optional<EnvSync> env_sync;
};

// What make_plan needs from the outside world, gathered by the caller.
struct PlanInputs {
  std::vector<env::Gpu> inventory;
  env::Environment inherited;
  std::string run_id;
  std::string run_dir;
  std::string executable;
  std::string cwd;
  int master_port = 0;
  int restart_count = 0;    // which attempt this plan starts (TORCHELASTIC_RESTART_COUNT)
  int node_rank = 0;        // which of spec.nodes this plan is for
  int nnodes = 0;           // the job's node count once a rendezvous has placed it; 0: spec.nodes
  std::string master_addr;  // "" means spec.rendezvous.master_addr, else 127.0.0.1
  // Multi-node: the interface this node reached master_addr through in the
  // reachability check (RendezvousClient::route); "" leaves the ranks'
  // socket interfaces be.
  std::string socket_ifname;
  // Once a rendezvous has placed the node: its first global rank and the
  // job's world size (nodes may differ). Unset: spec.nodes equal nodes.
  std::optional<int> rank_base;
  std::optional<int> world_size;
  // --ray: the token every Ray node and the driver authenticate with ("" for none).
  std::string ray_token;
  std::vector<int> ray_ports;  // --ray's head: its agents' ports, reserved (RayNode::agent_ports); empty: Ray picks
  // This node's processors (devices/topology.hpp), read when --cpu-bind or
  // --report-bindings asks; nullopt: the ranks are not bound here.
  std::optional<Topology> topology;
};

// Whether the spec needs this node's topology (--cpu-bind, --report-bindings).
bool needs_topology(const JobSpec& spec);

// What a rank is bound to before exec: its binding, or nullptr with --cpu-bind none.
const RankBinding* applied_binding(const LaunchPlan& plan, const RankPlan& rank);

// --report-bindings' line for a rank of the plan ("rank 3 (GPU 3): cores
// 48-63, NUMA node 1"); "" when it has no binding.
std::string report_line(const LaunchPlan& plan, const RankPlan& rank);

// Throws sgpu::Error for contradictory or impossible requests.
LaunchPlan make_plan(const JobSpec& spec, const PlanInputs& inputs);

// --max-restarts and --restart-backoff, checked: on one node or many, the
// launcher's before anything starts and each plan's. Pure; throws sgpu::Error.
struct RestartPolicy {
  int max_restarts = 0;
  env::Seconds backoff{1};
};
RestartPolicy restart_policy(const JobSpec& spec);

// The interpreter or executable a rank runs, as an absolute path. Throws
// sgpu::Error with exit code 127 (not found) or 126 (not executable).
std::string resolve_program(const JobSpec& spec, const env::Environment& environment, const std::string& cwd);
// The job's interpreter: --python, else $SGPU_PYTHON, else python3, as a
// path; throws sgpu::Error naming where it came from.
std::string resolve_python(const JobSpec& spec, const env::Environment& environment, const std::string& cwd);

// The program as the spec names it, for a node that resolves it on its own
// PATH: the executable, else the interpreter ($SGPU_PYTHON's choice, else "python3").
std::string program_name(const JobSpec& spec);

// The slots of one node (--gpus-per-node, --gpus over the nodes, --nproc,
// else one per visible GPU or one CPU rank). Pure.
int node_slots(const JobSpec& spec, const std::vector<env::Gpu>& inventory);

// Number of ranks on one node: its slots, or 1 with --ray (one Ray node with
// those slots as its resources). Pure.
int rank_count(const JobSpec& spec, const std::vector<env::Gpu>& inventory);

// torchrun's --nproc-per-node gpu|auto|cpu: turns spec.nproc_mode into GPU
// ranks (one per visible GPU, on each node) or `cpus` CPU ranks.
void resolve_nproc_mode(JobSpec& spec, const std::vector<env::Gpu>& inventory, int cpus);

}  // namespace sgpu::launcher
