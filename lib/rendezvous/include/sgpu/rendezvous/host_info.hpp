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

}  // namespace sgpu::rendezvous
