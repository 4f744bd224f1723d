#include "sgpu/env/restart.hpp"

#include <algorithm>

namespace sgpu::env {

Seconds restart_backoff(Seconds base, int restart) {
  if (base <= Seconds{0} || restart < 1) return Seconds{0};
  Seconds wait = base;
  for (int i = 1; i < restart && wait < kMaxRestartBackoff; ++i) wait *= 2;
  return std::min(wait, kMaxRestartBackoff);
}

bool restartable(const JobEnd& end) {
  if (end.kind == JobEnd::Kind::Hung) return true;              // a stuck collective may not stick twice
  if (end.kind == JobEnd::Kind::NodeLost) return end.replaced;  // on a spare, with the same WORLD_SIZE
  if (end.kind != JobEnd::Kind::RankFailed) return false;
  // The shell's "not executable" and "not found": the same program fails the same way.
  return !(end.status.code && (*end.status.code == 126 || *end.status.code == 127));
}

}  // namespace sgpu::env
