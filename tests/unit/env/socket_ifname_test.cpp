#include <string>

#include <doctest/doctest.h>

#include "sgpu/env/socket_ifname.hpp"

using sgpu::env::Environment;

TEST_CASE("env::nccl_ifname_selects reads NCCL's filter as NCCL does") {
  struct Case {
    const char* filter;
    const char* iface;
    bool selected;
  };
  for (const auto& c :
       {Case{"eth0", "eth0", true}, Case{"eth", "eth1", true},       // prefixes
        Case{"eth", "enp3s0", false}, Case{"ib,eth", "eth2", true},  // a list
        Case{"=eth0", "eth0", true}, Case{"=eth0", "eth01", false},  // exact
        Case{"^docker,lo", "eth0", true}, Case{"^docker,lo", "docker0", false}, Case{"^docker,lo", "lo", false},
        Case{"^=eth0", "eth01", true}, Case{"^=eth0", "eth0", false}}) {
    CAPTURE(c.filter);
    CAPTURE(c.iface);
    CHECK(sgpu::env::nccl_ifname_selects(c.filter, c.iface) == c.selected);
  }
}

TEST_CASE("env::pin_socket_interfaces: the routed interface, and the user's own value always wins") {
  struct Case {
    const char* what;
    Environment user;
    std::string routed;
    Environment expected;
  };
  const Case cases[] = {
      {"neither set: both get the routed interface",
       {},
       "eth1",
       {{"NCCL_SOCKET_IFNAME", "eth1"}, {"GLOO_SOCKET_IFNAME", "eth1"}}},
      {"no route known: nothing is set", {}, "", {}},
      {"both set by the user: kept",
       {{"NCCL_SOCKET_IFNAME", "ib0"}, {"GLOO_SOCKET_IFNAME", "eth0"}},
       "eth1",
       {{"NCCL_SOCKET_IFNAME", "ib0"}, {"GLOO_SOCKET_IFNAME", "eth0"}}},
      {"the user's NCCL exclusion list: gloo gets a concrete name it allows",
       {{"NCCL_SOCKET_IFNAME", "^docker,lo"}},
       "eth1",
       {{"NCCL_SOCKET_IFNAME", "^docker,lo"}, {"GLOO_SOCKET_IFNAME", "eth1"}}},
      {"the user's NCCL list excludes the routed interface: gloo is left alone",
       {{"NCCL_SOCKET_IFNAME", "^eth"}},
       "eth1",
       {{"NCCL_SOCKET_IFNAME", "^eth"}}},
      {"the user's NCCL prefix covers the routed interface",
       {{"NCCL_SOCKET_IFNAME", "eth"}},
       "eth1",
       {{"NCCL_SOCKET_IFNAME", "eth"}, {"GLOO_SOCKET_IFNAME", "eth1"}}},
      {"the user's NCCL names another interface: gloo is not set against it",
       {{"NCCL_SOCKET_IFNAME", "ib0"}},
       "eth1",
       {{"NCCL_SOCKET_IFNAME", "ib0"}}},
      {"the user's gloo names the routed interface: NCCL gets exactly it",
       {{"GLOO_SOCKET_IFNAME", "eth0,eth1"}},
       "eth1",
       {{"GLOO_SOCKET_IFNAME", "eth0,eth1"}, {"NCCL_SOCKET_IFNAME", "=eth1"}}},
      {"the user's gloo names another: NCCL is left alone",
       {{"GLOO_SOCKET_IFNAME", "ib0"}},
       "eth1",
       {{"GLOO_SOCKET_IFNAME", "ib0"}}},
      {"set but empty counts as not set",
       {{"NCCL_SOCKET_IFNAME", ""}},
       "lo",
       {{"NCCL_SOCKET_IFNAME", "lo"}, {"GLOO_SOCKET_IFNAME", "lo"}}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    auto env = c.user;
    sgpu::env::pin_socket_interfaces(env, c.routed);
    CHECK(env == c.expected);
  }
}

TEST_CASE("env::build_rank_env pins the sockets only where a route was found") {
  sgpu::env::JobEnvironment job;
  sgpu::env::RankPlacement place{0, 0, 2, 1, 0, 2};
  auto none = sgpu::env::build_rank_env({}, job, place, {});
  CHECK(none.count("NCCL_SOCKET_IFNAME") == 0);
  job.socket_ifname = "eth1";
  job.extra = {{"GLOO_SOCKET_IFNAME", "eth0"}};  // [env]: the user's
  auto pinned = sgpu::env::build_rank_env({}, job, place, {});
  CHECK(pinned.at("GLOO_SOCKET_IFNAME") == "eth0");
  CHECK(pinned.count("NCCL_SOCKET_IFNAME") == 0);
  job.extra = {};
  auto routed = sgpu::env::build_rank_env({{"NCCL_SOCKET_IFNAME", "^docker"}}, job, place, {});  // sgpu's environment
  CHECK(routed.at("NCCL_SOCKET_IFNAME") == "^docker");
  CHECK(routed.at("GLOO_SOCKET_IFNAME") == "eth1");
}
