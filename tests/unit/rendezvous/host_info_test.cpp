#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "sgpu/rendezvous/host_info.hpp"

using sgpu::rendezvous::hostname_address;
using sgpu::rendezvous::listen_overflows;
using sgpu::rendezvous::listen_overflows_in;
using sgpu::rendezvous::local_interfaces;
using sgpu::rendezvous::NetInterface;
using sgpu::rendezvous::rdma_devices;
using sgpu::rendezvous::RdmaDevice;

TEST_CASE("rendezvous::route_interface: the interface a connection to the address leaves by") {
  CHECK(sgpu::rendezvous::route_interface("127.0.0.1") == "lo");
  CHECK(sgpu::rendezvous::route_interface("127.0.1.1") == "lo");  // a hostname's Debian default
  CHECK(sgpu::rendezvous::route_interface("node-a") == "");       // names are not resolved here
  CHECK(sgpu::rendezvous::route_interface("") == "");
  // Each of this machine's own addresses is reached through the interface that holds it.
  for (const auto& address : sgpu::rendezvous::local_addresses()) {
    CAPTURE(address);
    CHECK_FALSE(sgpu::rendezvous::route_interface(address).empty());
  }
}

TEST_CASE("rendezvous::local_interfaces: loopback is there, up, with its kind and MTU from sysfs") {
  auto all = local_interfaces();
  auto lo = std::find_if(all.begin(), all.end(), [](const NetInterface& f) { return f.name == "lo"; });
  REQUIRE(lo != all.end());
  CHECK(lo->up);
  CHECK(lo->kind == "loopback");
  CHECK(lo->mtu >= 1500);
  CHECK(std::find(lo->addresses.begin(), lo->addresses.end(), "127.0.0.1") != lo->addresses.end());
}

TEST_CASE("rendezvous::rdma_devices reads /sys/class/infiniband: link layer (RoCE is Ethernet) and state") {
  namespace fs = std::filesystem;
  auto root = fs::temp_directory_path() / ("sgpu-sys-" + std::to_string(::getpid()));
  auto port = [&](const std::string& dev, const std::string& layer, const std::string& state) {
    fs::create_directories(root / "class/infiniband" / dev / "ports/1");
    std::ofstream(root / "class/infiniband" / dev / "ports/1/link_layer") << layer << "\n";
    std::ofstream(root / "class/infiniband" / dev / "ports/1/state") << state << "\n";
  };
  port("mlx5_1", "Ethernet", "1: DOWN");
  port("mlx5_0", "InfiniBand", "4: ACTIVE");
  auto found = rdma_devices(root.string());
  fs::remove_all(root);
  CHECK(found == std::vector<RdmaDevice>{{"mlx5_0", "InfiniBand", "ACTIVE"}, {"mlx5_1", "Ethernet", "DOWN"}});
  CHECK(rdma_devices("/nonexistent").empty());
}

TEST_CASE("rendezvous::hostname_address") {
  auto local = hostname_address("localhost");
  CHECK((local.rfind("127.", 0) == 0 || local == "::1"));
  CHECK(hostname_address("no-such-host.invalid").empty());
}

TEST_CASE("rendezvous::listen_overflows_in reads TcpExt ListenOverflows from /proc/net/netstat's text") {
  struct Case {
    std::string text;
    std::optional<std::uint64_t> expected;
  };
  const std::vector<Case> cases = {
      {"TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 12985 12985\n"
       "IpExt: InNoRoutes InTruncatedPkts\nIpExt: 0 0\n",
       12985},
      // IpExt first, no trailing newline.
      {"IpExt: InNoRoutes\nIpExt: 3\nTcpExt: ListenOverflows\nTcpExt: 7", 7},
      {"TcpExt: SyncookiesSent ListenDrops\nTcpExt: 0 1\n", std::nullopt},  // no such counter
      {"TcpExt: ListenOverflows ListenDrops\nTcpExt: 5\n", std::nullopt},   // the lines disagree
      {"TcpExt: ListenOverflows\nTcpExt: many\n", std::nullopt},            // not a number
      {"", std::nullopt},
  };
  for (const auto& c : cases) {
    CAPTURE(c.text);
    CHECK(listen_overflows_in(c.text) == c.expected);
  }
  CHECK(listen_overflows().has_value());  // this kernel's file says
}
