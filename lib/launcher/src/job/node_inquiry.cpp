#include "job/node_inquiry.hpp"

#include <fmt/format.h>
#include <boost/asio/post.hpp>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace rdzv = sgpu::rendezvous;

void NodeInquiries::ask_progress(const std::vector<InquiryNode>& nodes, std::chrono::milliseconds limit,
                                 std::function<void(std::optional<env::Seconds>)> answer) {
  auto id = next_id_++;
  pending_[id].on_progress = std::move(answer);
  start(id, rdzv::InspectWhat::Progress, nodes, limit, false);
}

void NodeInquiries::ask_stacks(const std::vector<InquiryNode>& nodes, bool native, std::chrono::milliseconds limit,
                               std::function<void(std::vector<RankStack>)> answer) {
  auto id = next_id_++;
  pending_[id].on_stacks = std::move(answer);
  start(id, rdzv::InspectWhat::Stacks, nodes, limit, native);
}

void NodeInquiries::start(std::uint32_t id, rdzv::InspectWhat what, const std::vector<InquiryNode>& nodes,
                          std::chrono::milliseconds limit, bool native) {
  auto& p = pending_[id];
  p.what = what;
  p.nodes = nodes;
  for (const auto& n : p.nodes) p.waiting.insert(n.node);
  p.deadline = std::make_unique<boost::asio::steady_timer>(io_, limit);
  p.deadline->async_wait([this, id](boost::system::error_code ec) {
    if (!ec) complete(id);
  });
  for (const auto& n : p.nodes) send_(n.node, rdzv::Inspect{id, p.what, native});
  if (p.waiting.empty()) boost::asio::post(io_, [this, id] { complete(id); });
}

void NodeInquiries::on_answer(std::uint32_t node, const rdzv::Inspection& answer) {
  auto it = pending_.find(answer.id);
  if (it == pending_.end() || !it->second.waiting.erase(node)) return;
  auto& p = it->second;
  auto age = env::Seconds(static_cast<double>(answer.progress_age_ms) / 1000.0);
  if (!p.youngest || age < *p.youngest) p.youngest = age;
  if (p.what == rdzv::InspectWhat::Stacks) {
    try {
      auto stacks = rank_stacks_from_json(nlohmann::json::parse(answer.stacks));
      p.stacks[node] = std::move(stacks);
    } catch (const std::exception& e) {  // a bad answer: its ranks are reported as not read
      p.stacks.erase(node);
    }
  }
  if (p.waiting.empty()) complete(answer.id);
}

void NodeInquiries::node_gone(std::uint32_t node) {
  std::vector<std::uint32_t> done;
  for (auto& [id, p] : pending_)
    if (p.waiting.erase(node) && p.waiting.empty()) done.push_back(id);
  for (auto id : done) complete(id);
}

void NodeInquiries::complete(std::uint32_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return;
  auto p = std::move(it->second);
  pending_.erase(it);
  p.deadline->cancel();
  if (p.what == rdzv::InspectWhat::Progress) {
    p.on_progress(p.youngest);
    return;
  }
  std::vector<RankStack> all;
  for (const auto& n : p.nodes) {
    auto got = p.stacks.find(n.node);
    if (got != p.stacks.end()) {
      for (auto& s : got->second) {
        s.host = n.name;  // the launcher's name for the node, as in the output's prefixes
        all.push_back(std::move(s));
      }
      continue;
    }
    for (int r = n.first_rank; r < n.first_rank + n.ranks; ++r) {
      RankStack s;
      s.rank = r;
      s.host = n.name;
      s.error = fmt::format("node {} did not answer with its ranks' stacks", n.name);
      all.push_back(std::move(s));
    }
  }
  p.on_stacks(std::move(all));
}

}  // namespace sgpu::launcher
