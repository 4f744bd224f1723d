#pragma once
// Socket set-up shared inside lib/rendezvous: the listening sockets (the
// rendezvous's, the reachability check's) and name resolution.
#include <string>
#include <utility>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::rendezvous {

// Binds and listens on `bind` ("" host: every interface, IPv4 and IPv6 where
// the node has it; port 0: a free one); returns the port. Throws sgpu::Error.
int listen_on(boost::asio::ip::tcp::acceptor& acceptor, const Endpoint& bind);

// The same on every interface and `port`, the failure in `ec` rather than
// thrown: node 0's listener for the reachability check (reach_probe.cpp).
void listen_everywhere(boost::asio::ip::tcp::acceptor& acceptor, unsigned short port, boost::system::error_code& ec);

// resolver.async_resolve(host, port, done), except that an address (the
// usual MASTER_ADDR and rendezvous endpoint) skips the resolver's helper
// thread: 16384 agents' hand-offs to it were a tenth of their CPU time.
template <typename Done>
void resolve(boost::asio::ip::tcp::resolver& resolver, const std::string& host, unsigned short port, Done&& done) {
  using tcp = boost::asio::ip::tcp;
  boost::system::error_code ec;
  auto address = boost::asio::ip::make_address(host, ec);
  if (ec) {
    resolver.async_resolve(host, std::to_string(port), std::forward<Done>(done));
    return;
  }
  auto found = tcp::resolver::results_type::create(tcp::endpoint(address, port), host, std::to_string(port));
  boost::asio::post(resolver.get_executor(),
                    [done = std::forward<Done>(done), found]() mutable { done(boost::system::error_code{}, found); });
}

}  // namespace sgpu::rendezvous
