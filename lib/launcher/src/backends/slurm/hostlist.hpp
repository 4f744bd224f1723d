#pragma once
// SLURM's hostlist syntax, parsed here rather than by shelling out to
// `scontrol show hostnames`, so node lists are known without a SLURM client
// and errors point at the character that is wrong.
//
//   n1,n2                -> n1 n2
//   n[01-04,07]          -> n01 n02 n03 n04 n07   (zero padding kept)
//   a,b[1-2]             -> a b1 b2
//   rack[1-2]-n[1-2]     -> rack1-n1 rack1-n2 rack2-n1 rack2-n2
#include <string>
#include <string_view>
#include <vector>

namespace sgpu::launcher::slurm {

// The most hosts one list may expand to: a guard against "n[0-999999999]".
inline constexpr std::size_t kMaxHostlistHosts = 1U << 20;

// Expands a hostlist in order, duplicates kept. `what` names where the text
// came from (SLURM_JOB_NODELIST, --nodelist) in errors, which give the column.
std::vector<std::string> expand_hostlist(std::string_view text, std::string_view what);

// The reverse: hosts that differ only in a trailing number, next to each
// other in `hosts`, share one bracket ("n[1-3,5],login1"). Order is kept, so
// expand_hostlist(compress_hostlist(h)) == h for any list of plain hostnames.
std::string compress_hostlist(const std::vector<std::string>& hosts);

}  // namespace sgpu::launcher::slurm
