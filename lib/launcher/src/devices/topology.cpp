#include "sgpu/launcher/devices/topology.hpp"

#include <hwloc.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace {

constexpr const char* kHook = "SGPU_TEST_HWLOC_TOPOLOGY";

struct TopologyHandle {
  hwloc_topology_t topology = nullptr;
  TopologyHandle() { hwloc_topology_init(&topology); }
  ~TopologyHandle() { hwloc_topology_destroy(topology); }
  TopologyHandle(const TopologyHandle&) = delete;
  TopologyHandle& operator=(const TopologyHandle&) = delete;
};

struct Bitmap {
  hwloc_bitmap_t set = hwloc_bitmap_alloc();
  ~Bitmap() { hwloc_bitmap_free(set); }
  Bitmap() = default;
  Bitmap(const Bitmap&) = delete;
  Bitmap& operator=(const Bitmap&) = delete;
};

int logical_ancestor(hwloc_topology_t topology, hwloc_obj_t pu, hwloc_obj_type_t type, int otherwise) {
  auto* obj = hwloc_get_ancestor_obj_by_type(topology, type, pu);
  return obj != nullptr ? static_cast<int>(obj->logical_index) : otherwise;
}

// The OS index of the NUMA node whose CPUs include `pu`; 0 on a machine
// without NUMA nodes (hwloc then shows one).
int numa_of(hwloc_topology_t topology, hwloc_obj_t pu) {
  int n = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n; ++i) {
    auto* node = hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    if (node->cpuset != nullptr && hwloc_bitmap_isset(node->cpuset, pu->os_index) != 0)
      return static_cast<int>(node->os_index);
  }
  return 0;
}

}  // namespace

Topology load_topology(const env::Environment& environment, const std::string& where) {
  TopologyHandle handle;
  auto* topo = handle.topology;
  // Sockets, cores and NUMA nodes come from /sys (hwloc's Linux backend).
  // Its x86 backend would move sgpu onto each CPU in turn to read CPUID,
  // which took 50-70 ms on a busy 2-CPU machine against 10 without; caches
  // are not needed either.
  hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
  hwloc_topology_set_cache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  hwloc_topology_set_icache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
  Topology out;
  std::string hook;
  if (auto it = environment.find(kHook); it != environment.end() && !it->second.empty()) hook = it->second;
  if (!hook.empty()) {
    bool file = hook.find('/') != std::string::npos || hook.ends_with(".xml");
    int rc = file ? hwloc_topology_set_xml(topo, hook.c_str()) : hwloc_topology_set_synthetic(topo, hook.c_str());
    if (rc != 0)
      throw Error(fmt::format("{}: {}={}: hwloc cannot read this {}{}", where, kHook, hook,
                              file ? "XML topology" : "synthetic description (e.g. \"pack:2 numa:2 core:16 pu:1\")",
                              file ? fmt::format(" ({})", std::strerror(errno)) : ""));
    out.source = fmt::format("{}={}", kHook, hook);
  } else {
    out.source = "hwloc";
  }
  if (hwloc_topology_load(topo) != 0)
    throw Error(fmt::format("{}: hwloc cannot read this machine's topology ({}); use --cpu-bind none", where,
                            std::strerror(errno)));
  // sgpu's own affinity (the test hook's machine allows everything).
  Bitmap allowed;
  if (!hook.empty())
    hwloc_bitmap_copy(allowed.set, hwloc_topology_get_complete_cpuset(topo));
  else if (hwloc_get_cpubind(topo, allowed.set, HWLOC_CPUBIND_PROCESS) != 0)
    throw Error(fmt::format("{}: cannot read sgpu's own CPU affinity ({})", where, std::strerror(errno)));
  int pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  for (int i = 0; i < pus; ++i) {
    auto* pu = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, static_cast<unsigned>(i));
    if (hwloc_bitmap_isset(allowed.set, pu->os_index) == 0) continue;
    Topology::Cpu cpu;
    cpu.os_index = static_cast<int>(pu->os_index);
    cpu.core = logical_ancestor(topo, pu, HWLOC_OBJ_CORE, static_cast<int>(pu->logical_index));
    cpu.package = logical_ancestor(topo, pu, HWLOC_OBJ_PACKAGE, 0);
    cpu.numa = numa_of(topo, pu);
    out.cpus.push_back(cpu);
  }
  if (out.cpus.empty()) throw Error(fmt::format("{}: hwloc finds none of the CPUs sgpu may run on", where));
  return out;
}

}  // namespace sgpu::launcher
