#include "sgpu/rendezvous/refusals.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

namespace sgpu::rendezvous {
namespace {
// Bounds what one attacker can make sgpu keep or print: distinct reasons (a
// version number or a frame size varies) and addresses per reason.
constexpr std::size_t kMaxReasons = 8;
constexpr std::size_t kMaxPeers = 3;

std::string times(std::size_t n) { return n == 1 ? "once" : fmt::format("{} times", n); }
}  // namespace

bool RefusalLog::add(const std::string& peer, const std::string& reason) {
  ++total_;
  auto it = std::find_if(reasons_.begin(), reasons_.end(), [&](const Reason& r) { return r.text == reason; });
  if (it == reasons_.end()) {
    if (reasons_.size() >= kMaxReasons) {
      ++other_;
      ++unsaid_;
      return false;
    }
    reasons_.push_back({reason, 1, {peer}});
    return true;
  }
  ++it->count;
  if (it->peers.size() < kMaxPeers && std::find(it->peers.begin(), it->peers.end(), peer) == it->peers.end())
    it->peers.push_back(peer);
  ++unsaid_;
  return false;
}

std::string RefusalLog::list(bool with_peers) const {
  std::vector<std::string> parts;
  for (const auto& r : reasons_) {
    if (!with_peers) {
      parts.push_back(fmt::format("{} ({})", r.text, times(r.count)));
      continue;
    }
    auto from = fmt::format("{}", fmt::join(r.peers, ", "));
    if (r.peers.size() >= kMaxPeers) from += ", ...";
    parts.push_back(fmt::format("from {}: {} ({})", from, r.text, times(r.count)));
  }
  if (other_ > 0) parts.push_back(fmt::format("{} for other reasons", other_));
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::string RefusalLog::take_unsaid() {
  if (unsaid_ == 0) return "";
  auto n = std::exchange(unsaid_, 0);
  return fmt::format("{} more rendezvous {} refused before authenticating, in all: {}", n,
                     n == 1 ? "peer was" : "peers were", list(false));
}

std::string RefusalLog::describe() const {
  if (total_ == 0) return "";
  return fmt::format("{} {} refused ({}): {}", total_, total_ == 1 ? "peer was" : "peers were",
                     "a node with another secret or sgpu version is refused, and never ends the wait", list(true));
}

}  // namespace sgpu::rendezvous
