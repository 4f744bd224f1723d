#pragma once
// CPU and NUMA binding (--cpu-bind): which CPUs, and which NUMA node's
// memory, each rank of a node gets, from the node's topology (loaded with
// hwloc by devices/topology.hpp) and its GPUs' NUMA nodes (NVML). Pure: the
// plan is made before any rank starts, so a binding that cannot be made is an
// error then; the ranks are bound between clone and exec (process/spawn.cpp).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

// One node's processors, as far as sgpu may use them.
struct Topology {
  struct Cpu {
    int os_index = 0;  // Linux's CPU number (sched_setaffinity, Cpus_allowed_list)
    int core = 0;      // its core, unique on the node
    int numa = 0;      // its NUMA node (Linux's number)
    int package = 0;   // its socket
  };
  // The CPUs sgpu itself may run on (its own affinity: a SLURM step's, a
  // cgroup's, taskset's), in hwloc's order: a core's CPUs together, cores in
  // NUMA node and socket order.
  std::vector<Cpu> cpus;
  std::string source;  // "hwloc", or the test hook's description
};

// What one rank is bound to.
struct RankBinding {
  std::vector<int> cpus;  // Linux CPU numbers, ascending
  int cores = 0;          // the distinct cores among them: the rank's OMP_NUM_THREADS
  int numa_node = -1;     // memory preferred there (MPOL_PREFERRED); -1: the kernel's default
};

// The binding of each rank of one node. `rank_numa[i]`: the NUMA node of
// local rank i's GPU, -1 for a CPU rank (or a GPU whose node is unknown).
//   numa       every CPU of the GPU's NUMA node; CPU ranks spread over the
//              nodes in blocks (ranks 0-3 on node 0, 4-7 on node 1, ...)
//   socket     every CPU of the GPU's socket; CPU ranks in blocks over sockets
//   core       one core per rank: the next free one of its GPU's NUMA node
//              (CPU ranks: of the whole set), shared once every one is taken
//   exclusive  the cores of the GPU's NUMA node split evenly between the
//              ranks of its GPUs (CPU ranks: every core), none shared; fewer
//              cores than ranks is an error
//   none       every rank gets the whole set, unbound (what --report-bindings shows)
// `where` starts an error message ("--cpu-bind exclusive"). Throws
// sgpu::Error when a binding cannot be made.
std::vector<RankBinding> plan_bindings(CpuBind mode, const Topology& topology, const std::vector<int>& rank_numa,
                                       const std::string& where);

// The NUMA node holding most of `cpus` (Linux numbers), -1 when none is known.
int numa_node_of(const Topology& topology, const std::vector<int>& cpus);

// "0-3,8,10-11": Linux's cpulist format (Cpus_allowed_list, taskset -c).
std::string cpu_list_text(const std::vector<int>& cpus);

// --report-bindings' line: "rank 3 (GPU 3): cores 48-63, NUMA node 1";
// "rank 0: cores 0-1, not bound" for --cpu-bind none.
std::string binding_line(int rank, std::optional<int> gpu, const RankBinding& binding, bool bound);

// The same as JSON (events.jsonl, summary.json, --dry-run -o json):
// {"cpus": "48-63", "cores": 16, "numa_node": 1, "bound": true}.
nlohmann::ordered_json binding_json(const RankBinding& binding, bool bound);

}  // namespace sgpu::launcher
