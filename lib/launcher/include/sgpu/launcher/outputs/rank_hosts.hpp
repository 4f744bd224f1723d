#pragma once
// Which node each rank's events and rows name, as the rendezvous places nodes.
#include <cstddef>
#include <string>
#include <vector>

#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

// Each placed node's name on its ranks in `rank_hosts` (by rank): a spare
// that took a lost node's place names the ranks it runs from then on. An
// empty entry (a rank of the launcher's own node) and a rank outside the
// vector stay as they are.
inline void apply_placement(std::vector<std::string>& rank_hosts, const std::vector<NodePlacement>& nodes) {
  for (const auto& n : nodes)
    for (int r = n.first_rank; r < n.first_rank + n.ranks; ++r)
      if (r >= 0 && static_cast<std::size_t>(r) < rank_hosts.size() && !rank_hosts[static_cast<std::size_t>(r)].empty())
        rank_hosts[static_cast<std::size_t>(r)] = n.host;
}

}  // namespace sgpu::launcher
