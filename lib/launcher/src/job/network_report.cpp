#include "sgpu/launcher/job/network_report.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "sgpu/env/socket_ifname.hpp"
#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::launcher {

using rendezvous::is_loopback_address;

namespace {
std::string value_of(const env::Environment& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}
}  // namespace

std::vector<NodeNetwork> node_networks(const NetworkExplained& e, const env::Environment& user) {
  std::vector<NodeNetwork> out;
  out.reserve(e.nodes.size());
  for (const auto& n : e.nodes) {
    env::Environment env = user;
    env::pin_socket_interfaces(env, n.socket_interface);
    out.push_back({n.node_rank, n.name, n.socket_interface, n.reach_us / 1000.0, value_of(env, "NCCL_SOCKET_IFNAME"),
                   value_of(env, "GLOO_SOCKET_IFNAME")});
  }
  return out;
}

std::string network_text(const NetworkExplained& e, const std::vector<NodeNetwork>& nodes) {
  std::string out = fmt::format("MASTER_ADDR {}, MASTER_PORT {}: every node reaches it; no rank was started\n",
                                e.master_addr, e.master_port);
  std::vector<std::vector<std::string>> rows = {
      {"node", "name", "interface", "connect", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}};
  for (const auto& n : nodes)
    rows.push_back({std::to_string(n.node_rank), n.name, n.interface.empty() ? "?" : n.interface,
                    n.node_rank == 0 ? "listens" : fmt::format("{:.1f}ms", n.connect_ms),
                    n.nccl_ifname.empty() ? "-" : n.nccl_ifname, n.gloo_ifname.empty() ? "-" : n.gloo_ifname});
  std::vector<std::size_t> width(rows.front().size(), 0);
  for (const auto& r : rows)
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i)
      line += i + 1 == r.size() ? r[i] : fmt::format("{:<{}}  ", r[i], width[i]);
    out += line + "\n";
  }
  out +=
      "The interfaces are those each node's kernel routes MASTER_ADDR through; a NCCL_SOCKET_IFNAME or "
      "GLOO_SOCKET_IFNAME you set (here, in [env] or on the node) wins.\n";
  for (std::size_t i = 0; i < e.nodes.size() && i < nodes.size(); ++i) {
    const auto& n = e.nodes[i];
    std::vector<std::string> parts;
    for (const auto& f : n.interfaces)
      parts.push_back(fmt::format("{} {}{}{}{}", f.name, f.up ? "up" : "down",
                                  f.mtu ? fmt::format(" mtu {}", f.mtu) : "", f.kind == "infiniband" ? " (IPoIB)" : "",
                                  f.addresses.empty() ? "" : " " + fmt::format("{}", fmt::join(f.addresses, " "))));
    for (const auto& d : n.rdma)
      parts.push_back(fmt::format("RDMA {} ({}{}, {})", d.name, d.link_layer,
                                  d.link_layer == "Ethernet" ? ": RoCE" : "", d.state.empty() ? "?" : d.state));
    out += fmt::format("node {} ({}): {}\n", n.node_rank, n.name,
                       parts.empty() ? "no interface reported" : fmt::format("{}", fmt::join(parts, "; ")));
    if (is_loopback_address(n.hostname_address))
      out += fmt::format(
          "  its hostname {} resolves to {} there: gloo, left to choose, would bind loopback (sgpu sets "
          "GLOO_SOCKET_IFNAME)\n",
          n.hostname, n.hostname_address);
  }
  return out;
}

nlohmann::ordered_json network_json(const NetworkExplained& e, const std::vector<NodeNetwork>& nodes) {
  auto list = nlohmann::ordered_json::array();
  using J = nlohmann::ordered_json;
  auto or_null = [](const std::string& s) { return s.empty() ? J(nullptr) : J(s); };
  for (const auto& n : nodes)
    list.push_back({{"node_rank", n.node_rank},
                    {"name", n.name},
                    {"interface", or_null(n.interface)},
                    {"connect_ms", n.node_rank == 0 ? J(nullptr) : J(n.connect_ms)},
                    {"NCCL_SOCKET_IFNAME", or_null(n.nccl_ifname)},
                    {"GLOO_SOCKET_IFNAME", or_null(n.gloo_ifname)}});
  for (std::size_t i = 0; i < e.nodes.size() && i < list.size(); ++i) {
    const auto& n = e.nodes[i];
    auto interfaces = J::array();
    for (const auto& f : n.interfaces)
      interfaces.push_back(
          {{"name", f.name}, {"addresses", f.addresses}, {"up", f.up}, {"mtu", f.mtu}, {"kind", f.kind}});
    auto rdma = J::array();
    for (const auto& d : n.rdma) rdma.push_back({{"name", d.name}, {"link_layer", d.link_layer}, {"state", d.state}});
    list[i]["hostname"] = n.hostname;
    list[i]["hostname_resolves_to"] = or_null(n.hostname_address);
    list[i]["interfaces"] = interfaces;
    list[i]["rdma"] = rdma;
  }
  return {{"master_addr", e.master_addr}, {"master_port", e.master_port}, {"reachable", true}, {"nodes", list}};
}

}  // namespace sgpu::launcher
