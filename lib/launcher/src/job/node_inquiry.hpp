#pragma once
// The launcher's questions to every node of a running job (--hang-timeout,
// the timeout's stacks, `sgpu stacks`): one Inspect to each node that still
// runs, the answers gathered, and the question answered once every node has
// replied or its deadline passed. A node that is lost or slow never holds up
// the answer: its ranks are reported as not read. Internal to lib/launcher.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"
#include "sgpu/rendezvous/protocol.hpp"

namespace sgpu::launcher {

struct InquiryNode {
  std::uint32_t node = 0;
  std::string name;
  int first_rank = 0;
  int ranks = 0;
};

class NodeInquiries {
 public:
  using Send = std::function<void(std::uint32_t node, const rendezvous::Inspect&)>;
  NodeInquiries(boost::asio::io_context& io, Send send) : io_(io), send_(std::move(send)) {}

  // The newest progress over `nodes`: the smallest age any answered; nullopt
  // when none did within `limit`.
  void ask_progress(const std::vector<InquiryNode>& nodes, std::chrono::milliseconds limit,
                    std::function<void(std::optional<env::Seconds>)> answer);
  // Every rank's stack on `nodes`, in rank order; a node that did not answer
  // within `limit` has its ranks reported as not read.
  void ask_stacks(const std::vector<InquiryNode>& nodes, bool native, std::chrono::milliseconds limit,
                  std::function<void(std::vector<RankStack>)> answer);
  // A node's answer (ignored when it answers nothing pending).
  void on_answer(std::uint32_t node, const rendezvous::Inspection& answer);
  // A node is gone: no answer will come from it.
  void node_gone(std::uint32_t node);

 private:
  struct Pending {
    rendezvous::InspectWhat what{};
    std::vector<InquiryNode> nodes;
    std::set<std::uint32_t> waiting;
    std::optional<env::Seconds> youngest;
    std::map<std::uint32_t, std::vector<RankStack>> stacks;
    std::function<void(std::optional<env::Seconds>)> on_progress;
    std::function<void(std::vector<RankStack>)> on_stacks;
    std::unique_ptr<boost::asio::steady_timer> deadline;
  };
  void start(std::uint32_t id, rendezvous::InspectWhat what, const std::vector<InquiryNode>& nodes,
             std::chrono::milliseconds limit, bool native);
  void complete(std::uint32_t id);

  boost::asio::io_context& io_;
  Send send_;
  std::uint32_t next_id_ = 1;
  std::map<std::uint32_t, Pending> pending_;
};

}  // namespace sgpu::launcher
