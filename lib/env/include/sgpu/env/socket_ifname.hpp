#pragma once
// NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME for a node's ranks. Left to
// themselves NCCL and gloo pick an interface by their own order (docker0, a
// management NIC, loopback where the hostname resolves to 127.0.1.1) and a
// multi-node job hangs in init_process_group. The interface the node's
// kernel routes MASTER_ADDR through is the one that reaches it. Pure.
#include <string>
#include <string_view>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::env {

// Whether NCCL's NCCL_SOCKET_IFNAME `filter` lets it use `iface`: a
// comma-separated list of name prefixes ("eth,ib"), exact names after "="
// ("=eth0"), and after "^" the ones it must not use ("^docker,lo").
bool nccl_ifname_selects(std::string_view filter, std::string_view iface);

// Sets the two variables in a rank's environment `env` (which holds the
// user's own: sgpu's environment and [env]) to `routed`, the interface that
// reaches MASTER_ADDR ("" when unknown: nothing changes). The user's value
// always wins: a variable set is kept, and the other one is set only where
// it agrees with it (gloo takes one concrete name and no "^" list, so beside
// a user's NCCL filter it gets `routed` where that filter selects it).
void pin_socket_interfaces(Environment& env, const std::string& routed);

}  // namespace sgpu::env
