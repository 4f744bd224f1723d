#include "sgpu/rendezvous/assignment.hpp"

#include <algorithm>
#include <numeric>
#include <string_view>
#include <unordered_map>

#include <fmt/format.h>

#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::rendezvous {

JoinCheck check_join(std::size_t joined, const Join* holder, const Join& candidate, std::uint32_t nnodes) {
  using Kind = JoinCheck::Kind;
  if (candidate.local_ranks == 0) return {Kind::Refuse, fmt::format("node {} has no ranks to run", candidate.name)};
  if (candidate.nnodes != 0 && candidate.nnodes != nnodes)
    return {Kind::Conflict, fmt::format("node {} was started for {} nodes but the launcher runs {} (--nnodes differs)",
                                        candidate.name, candidate.nnodes, nnodes)};
  if (candidate.node_rank >= 0 && static_cast<std::uint32_t>(candidate.node_rank) >= nnodes)
    return {Kind::Conflict, fmt::format("node {} asked for node rank {} but the job has {} nodes (valid: 0 to {})",
                                        candidate.name, candidate.node_rank, nnodes, nnodes - 1)};
  if (joined >= nnodes) return {Kind::Refuse, fmt::format("the rendezvous is full: all {} nodes have joined", nnodes)};
  if (holder != nullptr)
    return {Kind::Conflict,
            fmt::format("node rank {} is claimed by both {} and {} (--node-rank must differ on every node)",
                        candidate.node_rank, holder->name, candidate.name)};
  return {};
}

std::vector<std::uint32_t> assign_node_ranks(const std::vector<Join>& joined, std::uint32_t nnodes) {
  std::vector<std::uint32_t> ranks(joined.size(), 0);
  std::vector<bool> taken(nnodes, false);
  std::vector<std::size_t> free_choice;
  for (std::size_t i = 0; i < joined.size(); ++i) {
    if (joined[i].node_rank >= 0) {
      ranks[i] = static_cast<std::uint32_t>(joined[i].node_rank);
      taken[ranks[i]] = true;
    } else {
      free_choice.push_back(i);
    }
  }
  std::stable_sort(free_choice.begin(), free_choice.end(),
                   [&](std::size_t a, std::size_t b) { return joined[a].name < joined[b].name; });
  std::uint32_t next = 0;
  for (auto i : free_choice) {
    while (next < nnodes && taken[next]) ++next;
    ranks[i] = next;
    if (next < nnodes) taken[next] = true;
  }
  return ranks;
}

std::vector<std::uint32_t> rank_bases(const std::vector<std::uint32_t>& local_ranks_by_node) {
  std::vector<std::uint32_t> bases(local_ranks_by_node.size(), 0);
  std::exclusive_scan(local_ranks_by_node.begin(), local_ranks_by_node.end(), bases.begin(), 0U);
  return bases;
}

std::string choose_master_addr(const MasterAddrInputs& in) {
  if (!in.override_addr.empty()) return in.override_addr;
  auto node0 = unmap_v4(in.node0_peer);
  if (!node0.empty() && !is_loopback_address(node0)) return node0;
  for (const auto& a : in.launcher_addresses_seen) {
    if (!a.empty() && !is_loopback_address(a)) return unmap_v4(a);
  }
  if (node0 == "::1") return node0;
  return "127.0.0.1";
}

std::vector<std::string> distinct_node_names(const std::vector<std::string>& names) {
  std::unordered_map<std::string_view, std::size_t> count;  // one pass: 16384 nodes, not 16384 squared compares
  count.reserve(names.size());
  for (const auto& n : names) ++count[n];
  std::vector<std::string> out = names;
  for (std::size_t i = 0; i < names.size(); ++i)
    if (count[names[i]] > 1) out[i] = fmt::format("{}#{}", names[i], i);
  return out;
}

std::string describe_missing(const std::vector<Join>& joined, std::uint32_t nnodes,
                             const std::vector<std::string>& expected_names) {
  std::vector<std::string> present;
  std::vector<bool> rank_present(nnodes, false);
  std::vector<std::string> names_present;
  for (const auto& j : joined) {
    if (j.node_rank >= 0 && static_cast<std::uint32_t>(j.node_rank) < nnodes) {
      rank_present[static_cast<std::size_t>(j.node_rank)] = true;
      present.push_back(fmt::format("{} as node rank {}", j.name, j.node_rank));
    } else {
      present.push_back(j.name);
      names_present.push_back(j.name);
    }
  }
  std::string out = fmt::format("{} of {} nodes joined", joined.size(), nnodes);
  if (!present.empty()) out += fmt::format(" ({})", fmt::join(present, ", "));
  std::vector<std::string> missing;
  std::size_t unranked_left = names_present.size();
  for (std::uint32_t r = 0; r < nnodes; ++r) {
    if (rank_present[r]) continue;
    if (r < expected_names.size()) {
      auto it = std::find(names_present.begin(), names_present.end(), expected_names[r]);
      if (it != names_present.end()) {
        names_present.erase(it);
        --unranked_left;
        continue;
      }
      missing.push_back(fmt::format("{} (node rank {})", expected_names[r], r));
    } else {
      missing.push_back(fmt::format("node rank {}", r));
    }
  }
  if (unranked_left == 0 && !missing.empty()) return out + "; missing: " + fmt::format("{}", fmt::join(missing, ", "));
  auto absent = nnodes - static_cast<std::uint32_t>(joined.size());
  return out + fmt::format("; {} more node{} never came", absent, absent == 1 ? "" : "s");
}

}  // namespace sgpu::rendezvous
