#include <doctest/doctest.h>

#include "sgpu/rendezvous/host_info.hpp"

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
