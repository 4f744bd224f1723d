#pragma once
// What an agent says about its node when it joins: its name and the addresses
// other nodes might reach it by.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/rendezvous/protocol.hpp"

namespace sgpu::rendezvous {

std::string local_hostname();

// Addresses of this node's interfaces that are up, loopback and IPv6
// link-local ones left out: IPv4 first, then IPv6.
std::vector<std::string> local_addresses();

// Every interface of this node (at most kMaxInterfaces, 16 addresses each),
// in the kernel's order, with its state, MTU and kind (sysfs).
std::vector<NetInterface> local_interfaces(const std::string& sys_root = "/sys");

// RDMA devices under `sys_root`/class/infiniband: port 1's link layer and
// state. None on a machine without them.
std::vector<RdmaDevice> rdma_devices(const std::string& sys_root = "/sys");

// The first address `hostname` resolves to here (files and DNS, as gloo
// and NCCL resolve it); "" when it does not.
std::string hostname_address(const std::string& hostname);

// The interface this node's kernel routes `address` (numeric, v4 or v6)
// through: the one a connection to it leaves by. "" when there is no route
// or the address is not numeric. Sends nothing (a UDP socket's connect).
std::string route_interface(const std::string& address);

// How many connections this machine's kernel dropped because a listen queue
// was full (TcpExt ListenOverflows), from /proc/net/netstat's text (pure) or
// the file; nullopt when it does not say.
std::optional<std::uint64_t> listen_overflows_in(std::string_view netstat);
std::optional<std::uint64_t> listen_overflows();

}  // namespace sgpu::rendezvous
