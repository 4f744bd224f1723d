#include "sgpu/rendezvous/endpoint.hpp"

#include <charconv>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::rendezvous {

std::string Endpoint::str() const {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

Endpoint parse_endpoint(std::string_view text, std::string_view flag) {
  auto bad = [&](std::string_view why) {
    return Error(fmt::format("{} {}: {}; expected HOST:PORT, e.g. node0:29400 or [fe80::1]:29400", flag, text, why));
  };
  Endpoint e;
  std::string_view port;
  if (text.starts_with('[')) {
    auto close = text.find(']');
    if (close == std::string_view::npos) throw bad("no closing ']'");
    e.host = std::string(text.substr(1, close - 1));
    if (close + 1 >= text.size() || text[close + 1] != ':') throw bad("no port");
    port = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) throw bad("no port");
    e.host = std::string(text.substr(0, colon));
    if (e.host.find(':') != std::string::npos) throw bad("an IPv6 address needs brackets");
    port = text.substr(colon + 1);
  }
  if (e.host.empty()) throw bad("no host");
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), e.port);
  if (ec != std::errc() || end != port.data() + port.size() || port.empty()) throw bad("the port is not a number");
  if (e.port < 1 || e.port > 65535) throw bad("the port must be between 1 and 65535");
  return e;
}

std::string unmap_v4(std::string_view address) {
  constexpr std::string_view kMapped = "::ffff:";
  if (address.starts_with(kMapped) && address.find('.') != std::string_view::npos)
    return std::string(address.substr(kMapped.size()));
  return std::string(address);
}

bool is_loopback_address(std::string_view address) {
  auto a = unmap_v4(address);
  return a.starts_with("127.") || a == "::1" || a == "localhost";
}

}  // namespace sgpu::rendezvous
