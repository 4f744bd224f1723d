#pragma once
// HOST:PORT as users write it, and the address rules the rendezvous needs.
// Pure: no name resolution here.
#include <string>
#include <string_view>

namespace sgpu::rendezvous {

struct Endpoint {
  std::string host;  // name, IPv4 or IPv6 address (without brackets)
  int port = 0;
  // "host:port", "[v6addr]:port".
  std::string str() const;
  bool operator==(const Endpoint&) const = default;
};

// "node0:29400", "10.0.0.1:29400", "[fe80::1]:29400". `flag` names the option
// in errors. Ports are 1-65535.
Endpoint parse_endpoint(std::string_view text, std::string_view flag);

// "::ffff:10.0.0.1" (an IPv4 peer of a dual-stack socket) -> "10.0.0.1".
std::string unmap_v4(std::string_view address);

// 127.0.0.0/8, ::1 and their mapped forms.
bool is_loopback_address(std::string_view address);

}  // namespace sgpu::rendezvous
