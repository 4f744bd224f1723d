#include "sgpu/launcher/plan/binding.hpp"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace {

struct Core {
  int id = 0;
  std::vector<int> cpus;
  int numa = 0;
  int package = 0;
};

// The cores in topology order, each with its CPUs.
std::vector<Core> cores_of(const Topology& topology) {
  std::vector<Core> cores;
  std::map<int, std::size_t> at;
  for (const auto& c : topology.cpus) {
    auto [it, added] = at.emplace(c.core, cores.size());
    if (added) cores.push_back({c.core, {}, c.numa, c.package});
    cores[it->second].cpus.push_back(c.os_index);
  }
  return cores;
}

template <class Key>
std::vector<int> distinct(const Topology& topology, Key key) {
  std::vector<int> out;
  for (const auto& c : topology.cpus)
    if (std::find(out.begin(), out.end(), key(c)) == out.end()) out.push_back(key(c));
  return out;
}

RankBinding binding_of(const std::vector<const Core*>& cores, int numa_node) {
  RankBinding b;
  for (const auto* core : cores) b.cpus.insert(b.cpus.end(), core->cpus.begin(), core->cpus.end());
  std::sort(b.cpus.begin(), b.cpus.end());
  b.cores = static_cast<int>(cores.size());
  if (numa_node < 0) {
    // Memory follows the CPUs only when they are all on one node.
    std::set<int> nodes;
    for (const auto* core : cores) nodes.insert(core->numa);
    if (nodes.size() == 1) numa_node = *nodes.begin();
  }
  b.numa_node = numa_node;
  return b;
}

// The cores a rank may take: its GPU's NUMA node's, or every one for a CPU rank.
std::vector<const Core*> domain(const std::vector<Core>& cores, int numa) {
  std::vector<const Core*> out;
  for (const auto& c : cores)
    if (numa < 0 || c.numa == numa) out.push_back(&c);
  return out;
}

std::vector<int> all_cpus(const Topology& topology) {
  std::vector<int> cpus;
  for (const auto& c : topology.cpus) cpus.push_back(c.os_index);
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

// Index `i` of `n` spread in blocks over `count` groups: 0-3 -> 0, 4-7 -> 1...
std::size_t block(std::size_t i, std::size_t n, std::size_t count) { return i * count / std::max<std::size_t>(n, 1); }

RankBinding by_group(const Topology& topology, const std::vector<Core>& cores, bool socket, int numa,
                     std::size_t cpu_index, std::size_t cpu_ranks) {
  std::vector<const Core*> chosen;
  if (numa >= 0) {
    auto mine = domain(cores, numa);
    int package = mine.front()->package;
    chosen = socket ? std::vector<const Core*>{} : mine;
    if (socket)
      for (const auto& c : cores)
        if (c.package == package) chosen.push_back(&c);
    return binding_of(chosen, numa);
  }
  auto groups = socket ? distinct(topology, [](const Topology::Cpu& c) { return c.package; })
                       : distinct(topology, [](const Topology::Cpu& c) { return c.numa; });
  int group = groups[block(cpu_index, cpu_ranks, groups.size())];
  for (const auto& c : cores)
    if ((socket ? c.package : c.numa) == group) chosen.push_back(&c);
  return binding_of(chosen, -1);
}

}  // namespace

std::vector<RankBinding> plan_bindings(CpuBind mode, const Topology& topology, const std::vector<int>& rank_numa,
                                       const std::string& where) {
  if (topology.cpus.empty()) throw Error(fmt::format("{}: the topology lists no CPU sgpu may use", where));
  auto cores = cores_of(topology);
  // The ranks sharing each domain (a GPU's NUMA node, or -1: every core), in order.
  std::map<int, std::vector<std::size_t>> by_domain;
  for (std::size_t i = 0; i < rank_numa.size(); ++i) {
    int numa = rank_numa[i];
    if (numa >= 0 && domain(cores, numa).empty())
      throw Error(
          fmt::format("{}: the GPU of local rank {} is on NUMA node {}, which has none of the CPUs sgpu may "
                      "use ({}); use --cpu-bind core or none",
                      where, i, numa, cpu_list_text(all_cpus(topology))));
    by_domain[numa].push_back(i);
  }
  std::vector<RankBinding> out(rank_numa.size());
  for (const auto& [numa, ranks] : by_domain) {
    auto mine = domain(cores, numa);
    if (mode == CpuBind::Exclusive && mine.size() < ranks.size())
      throw Error(numa >= 0 ? fmt::format("{}: NUMA node {} has {} core{} sgpu may use for the {} ranks of its GPUs: "
                                          "each rank needs a core of its own; use --cpu-bind numa or core (shared)",
                                          where, numa, mine.size(), mine.size() == 1 ? "" : "s", ranks.size())
                            : fmt::format("{}: {} core{} sgpu may use (CPUs {}) for {} ranks: each rank needs a "
                                          "core of its own; use --cpu-bind core (shared) or fewer ranks",
                                          where, mine.size(), mine.size() == 1 ? "" : "s",
                                          cpu_list_text(all_cpus(topology)), ranks.size()));
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      auto& b = out[ranks[k]];
      switch (mode) {
        case CpuBind::None:
          b = binding_of(domain(cores, -1), -1);
          b.numa_node = -1;
          break;
        case CpuBind::Numa:
        case CpuBind::Socket:
          b = by_group(topology, cores, mode == CpuBind::Socket, numa, k, ranks.size());
          break;
        case CpuBind::Core:
          b = binding_of({mine[k % mine.size()]}, numa);
          break;
        case CpuBind::Exclusive: {
          auto first = mine.begin() + static_cast<std::ptrdiff_t>(block(k, ranks.size(), mine.size()));
          auto last = mine.begin() + static_cast<std::ptrdiff_t>(block(k + 1, ranks.size(), mine.size()));
          b = binding_of({first, last}, numa);
          break;
        }
      }
    }
  }
  return out;
}

int numa_node_of(const Topology& topology, const std::vector<int>& cpus) {
  std::map<int, int> count;
  for (const auto& c : topology.cpus)
    if (std::find(cpus.begin(), cpus.end(), c.os_index) != cpus.end()) ++count[c.numa];
  int best = -1;
  int most = 0;
  for (const auto& [node, n] : count)
    if (n > most) {
      best = node;
      most = n;
    }
  return best;
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + (j == i ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]));
    i = j + 1;
  }
  return out;
}

std::string binding_line(int rank, std::optional<int> gpu, const RankBinding& binding, bool bound) {
  std::string who = gpu ? fmt::format("rank {} (GPU {})", rank, *gpu) : fmt::format("rank {}", rank);
  if (!bound) return fmt::format("{}: cores {}, not bound", who, cpu_list_text(binding.cpus));
  return fmt::format("{}: cores {}, {}", who, cpu_list_text(binding.cpus),
                     binding.numa_node >= 0 ? fmt::format("NUMA node {}", binding.numa_node) : "every NUMA node");
}

nlohmann::ordered_json binding_json(const RankBinding& binding, bool bound) {
  return {{"cpus", cpu_list_text(binding.cpus)},
          {"cores", binding.cores},
          {"numa_node", binding.numa_node >= 0 ? nlohmann::ordered_json(binding.numa_node) : nullptr},
          {"bound", bound}};
}

}  // namespace sgpu::launcher
