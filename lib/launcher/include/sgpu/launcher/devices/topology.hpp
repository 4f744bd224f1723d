#pragma once
// This node's processors as hwloc sees them (what Open MPI and SLURM bind
// with), restricted to the CPUs sgpu itself may run on: its own affinity,
// which a SLURM step, a cgroup or taskset may have narrowed; sgpu never binds
// a rank outside it. hwloc is linked statically (packaging/static_deps.cmake).
//
// Test hook: SGPU_TEST_HWLOC_TOPOLOGY stands in for the machine, as an hwloc
// synthetic description ("pack:2 numa:2 core:16 pu:1") or the path of an
// XML export (`lstopo topo.xml`); every CPU of it counts as allowed (README
// "Test hooks"). Only for plans: a rank cannot be bound to CPUs that do not exist.
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/plan/binding.hpp"

namespace sgpu::launcher {

// Throws sgpu::Error, starting with `where`, when hwloc cannot read the
// topology (or the test hook's description).
Topology load_topology(const env::Environment& environment, const std::string& where);

}  // namespace sgpu::launcher
