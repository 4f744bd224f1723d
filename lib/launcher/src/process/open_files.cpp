#include "sgpu/launcher/process/open_files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace {
constexpr rlim_t kPerRank = 6;  // stdout and stderr pipes, pidfd, two logs, one spare while it starts
constexpr rlim_t kBase = 64;    // stdio, the event loop, the run's files, the rendezvous
}  // namespace

rlim_t open_files_needed(int ranks) { return kBase + kPerRank * static_cast<rlim_t>(std::max(ranks, 0)); }

rlim_t raised_soft_limit(rlim_t soft, rlim_t hard, rlim_t needed) {
  if (soft == RLIM_INFINITY || soft >= needed) return soft;
  return hard == RLIM_INFINITY ? needed : std::min(needed, hard);
}

rlimit raise_open_files_limit(int ranks) {
  rlimit before{};
  if (::getrlimit(RLIMIT_NOFILE, &before) != 0) return before;
  auto needed = open_files_needed(ranks);
  auto soft = raised_soft_limit(before.rlim_cur, before.rlim_max, needed);
  if (soft < needed)
    throw Error(
        fmt::format("{} ranks on this node need about {} open files, but the hard limit (ulimit -Hn) is {}; "
                    "raise it (limits.conf, systemd LimitNOFILE) or run fewer ranks per node",
                    ranks, needed, before.rlim_max));
  if (soft != before.rlim_cur) {
    rlimit raised = before;
    raised.rlim_cur = soft;
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0)
      throw Error(fmt::format("{} ranks on this node need about {} open files; raising the limit from {} failed: {}",
                              ranks, needed, before.rlim_cur, std::strerror(errno)));
  }
  return before;
}

}  // namespace sgpu::launcher
