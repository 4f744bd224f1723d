#pragma once
// `sgpu launch --explain-network`: every node joins, the reachability check
// runs, and instead of starting ranks the launcher says how each node
// reaches MASTER_ADDR and what NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME its
// ranks would get.
#include <exception>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/rendezvous/server.hpp"

namespace sgpu::launcher {

// Thrown by ClusterJob::run() once the check passed (not an error: the
// launch was the check).
struct NetworkExplained : std::exception {
  std::string master_addr;
  int master_port = 0;
  std::vector<rendezvous::NodeInfo> nodes;  // by node rank
  const char* what() const noexcept override {
    return "explain network: every node reaches MASTER_ADDR, no rank started";
  }
};

// One node's line: its route and the two variables its ranks would get,
// from `user` (the variables the ranks see before sgpu's: this launcher's
// environment and [env]). Pure.
struct NodeNetwork {
  std::uint32_t node_rank = 0;
  std::string name;
  std::string interface;  // "" unknown
  double connect_ms = 0;  // node 0: its listen
  std::string nccl_ifname;
  std::string gloo_ifname;
};
std::vector<NodeNetwork> node_networks(const NetworkExplained& e, const env::Environment& user);

// The table a person reads, and the document `-o json` prints. Pure.
std::string network_text(const NetworkExplained& e, const std::vector<NodeNetwork>& nodes);
nlohmann::ordered_json network_json(const NetworkExplained& e, const std::vector<NodeNetwork>& nodes);

}  // namespace sgpu::launcher
