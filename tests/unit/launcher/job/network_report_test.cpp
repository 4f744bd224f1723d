#include <initializer_list>
#include <string>

#include <doctest/doctest.h>

#include "sgpu/launcher/job/network_report.hpp"

using namespace sgpu::launcher;

namespace {
NetworkExplained two_nodes() {
  NetworkExplained e;
  e.master_addr = "10.0.0.1";
  e.master_port = 29517;
  e.nodes.resize(2);
  e.nodes[0].node_rank = 0;
  e.nodes[0].name = "gpu-a";
  e.nodes[0].socket_interface = "eth0";
  e.nodes[0].reach_us = 40;
  e.nodes[1].node_rank = 1;
  e.nodes[1].name = "gpu-b";
  e.nodes[1].socket_interface = "ens5";
  e.nodes[1].reach_us = 312;
  e.nodes[1].hostname = "gpu-b";
  e.nodes[1].hostname_address = "127.0.1.1";
  e.nodes[1].interfaces = {{"ens5", {"10.0.0.2"}, true, 9001, "ether"}, {"ib0", {}, false, 2044, "infiniband"}};
  e.nodes[1].rdma = {{"mlx5_0", "Ethernet", "ACTIVE"}};
  return e;
}
}  // namespace

TEST_CASE("launcher::node_networks: the route, unless the user set the variables") {
  struct Row {
    sgpu::env::Environment user;
    const char* nccl_b;
    const char* gloo_b;
  };
  for (const auto& r : {
           Row{{}, "ens5", "ens5"},
           Row{{{"NCCL_SOCKET_IFNAME", "^docker,lo"}}, "^docker,lo", "ens5"},  // gloo gets a concrete name
           Row{{{"NCCL_SOCKET_IFNAME", "=eth1"}}, "=eth1", ""},                // the user's filter refuses ens5
           Row{{{"GLOO_SOCKET_IFNAME", "ib0"}}, "", "ib0"},
       }) {
    auto nodes = node_networks(two_nodes(), r.user);
    REQUIRE(nodes.size() == 2);
    CHECK(nodes[1].interface == "ens5");
    CHECK(nodes[1].connect_ms == doctest::Approx(0.312));
    CHECK(nodes[1].nccl_ifname == r.nccl_b);
    CHECK(nodes[1].gloo_ifname == r.gloo_b);
  }
}

TEST_CASE("launcher::network_text and network_json") {
  auto e = two_nodes();
  auto nodes = node_networks(e, {});
  auto text = network_text(e, nodes);
  CHECK(text.find("MASTER_ADDR 10.0.0.1, MASTER_PORT 29517: every node reaches it; no rank was started\n") == 0);
  CHECK(text.find("0     gpu-a  eth0       listens  eth0                eth0\n") != std::string::npos);
  CHECK(text.find("1     gpu-b  ens5       0.3ms    ens5                ens5\n") != std::string::npos);
  CHECK(text.find("node 1 (gpu-b): ens5 up mtu 9001 10.0.0.2; ib0 down mtu 2044 (IPoIB); RDMA mlx5_0 (Ethernet: RoCE, "
                  "ACTIVE)\n  its hostname gpu-b resolves to 127.0.1.1 there") != std::string::npos);
  CHECK(text.find("node 0 (gpu-a): no interface reported\n") != std::string::npos);
  auto doc = network_json(e, nodes);
  CHECK(doc["nodes"][1]["hostname_resolves_to"] == "127.0.1.1");
  CHECK(doc["nodes"][1]["interfaces"][1] == nlohmann::ordered_json{{"name", "ib0"},
                                                                   {"addresses", nlohmann::ordered_json::array()},
                                                                   {"up", false},
                                                                   {"mtu", 2044},
                                                                   {"kind", "infiniband"}});
  CHECK(doc["nodes"][1]["rdma"][0]["link_layer"] == "Ethernet");
  CHECK(doc["nodes"][0]["connect_ms"].is_null());
  CHECK(doc["nodes"][1]["GLOO_SOCKET_IFNAME"] == "ens5");
  CHECK(doc["master_port"] == 29517);
}
