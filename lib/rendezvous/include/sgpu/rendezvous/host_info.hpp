#pragma once
// What an agent says about its node when it joins: its name and the addresses
// other nodes might reach it by.
#include <string>
#include <vector>

namespace sgpu::rendezvous {

std::string local_hostname();

// Addresses of this node's interfaces that are up, loopback and IPv6
// link-local ones left out: IPv4 first, then IPv6.
std::vector<std::string> local_addresses();

// The interface this node's kernel routes `address` (numeric, v4 or v6)
// through: the one a connection to it leaves by. "" when there is no route
// or the address is not numeric. Sends nothing (a UDP socket's connect).
std::string route_interface(const std::string& address);

}  // namespace sgpu::rendezvous
