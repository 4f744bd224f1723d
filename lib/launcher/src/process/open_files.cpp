#include "sgpu/launcher/process/open_files.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace {
// Held for each running rank: its stdout and stderr pipes, its pidfd, its two
// log files. What a start holds besides (the pipes' write ends, /dev/null)
// is closed before the next rank starts: counted once, in the base.
constexpr rlim_t kPerRank = 5;
constexpr rlim_t kBase = 64;  // stdio, the event loop, the run's files, the rendezvous, one start's

std::string too_few(int ranks, rlim_t needed, rlim_t hard) {
  return fmt::format(
      "{} ranks on this node need about {} open files, but the hard limit (ulimit -Hn) is {}; "
      "raise it (limits.conf, systemd LimitNOFILE) or run fewer ranks per node",
      ranks, needed, hard);
}
}  // namespace

rlim_t open_files_needed(int ranks) { return kBase + kPerRank * static_cast<rlim_t>(std::max(ranks, 0)); }

rlim_t raised_soft_limit(rlim_t soft, rlim_t hard, rlim_t needed) {
  if (soft == RLIM_INFINITY || soft >= needed) return soft;
  return hard == RLIM_INFINITY ? needed : std::min(needed, hard);
}

void check_open_files_limit(int ranks) {
  rlimit now{};
  if (::getrlimit(RLIMIT_NOFILE, &now) != 0) return;
  auto needed = open_files_needed(ranks);
  if (raised_soft_limit(now.rlim_cur, now.rlim_max, needed) < needed) throw Error(too_few(ranks, needed, now.rlim_max));
}

rlimit raise_open_files_limit(int ranks) {
  rlimit before{};
  if (::getrlimit(RLIMIT_NOFILE, &before) != 0) return before;
  auto needed = open_files_needed(ranks);
  auto soft = raised_soft_limit(before.rlim_cur, before.rlim_max, needed);
  if (soft < needed) throw Error(too_few(ranks, needed, before.rlim_max));
  if (soft != before.rlim_cur) {
    rlimit raised = before;
    raised.rlim_cur = soft;
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0)
      throw Error(fmt::format("{} ranks on this node need about {} open files; raising the limit from {} failed: {}",
                              ranks, needed, before.rlim_cur, std::strerror(errno)));
  }
  return before;
}

void reserve_descriptor_table(rlim_t entries) {
  rlimit lim{};
  if (entries == 0 || ::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  rlim_t top = std::min(entries, lim.rlim_cur) - 1;
  if (top > static_cast<rlim_t>(std::numeric_limits<int>::max())) return;
  // The lowest free number at or above `top`: the table grows to hold it. Any open descriptor will do to copy: 0 is
  // always open in sgpu (open_standard_fds).
  int fd = ::fcntl(0, F_DUPFD_CLOEXEC, static_cast<int>(top));
  if (fd >= 0) ::close(fd);
}

rlim_t node_connections_wanted(int nnodes) { return 2 * static_cast<rlim_t>(std::max(nnodes, 0)) + 256; }
rlim_t node_connections_needed(int nnodes) { return static_cast<rlim_t>(std::max(nnodes, 0)) + 32; }

void allow_node_connections(int nnodes) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return;
  auto want = node_connections_wanted(nnodes);
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur >= want) return;
  if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < want) {
    rlimit more{want, want};  // root (CAP_SYS_RESOURCE) may raise the hard limit, up to fs.nr_open
    if (::setrlimit(RLIMIT_NOFILE, &more) == 0) return;
  }
  auto needed = node_connections_needed(nnodes);
  if (raised_soft_limit(lim.rlim_cur, lim.rlim_max, needed) < needed)
    throw Error(
        fmt::format("--nnodes {}: the launcher holds a connection per node and needs at least {} open files, "
                    "but the hard limit (ulimit -Hn) is {}; raise it (limits.conf, systemd LimitNOFILE)",
                    nnodes, needed, lim.rlim_max));
  lim.rlim_cur = raised_soft_limit(lim.rlim_cur, lim.rlim_max, want);
  ::setrlimit(RLIMIT_NOFILE, &lim);
}

}  // namespace sgpu::launcher
