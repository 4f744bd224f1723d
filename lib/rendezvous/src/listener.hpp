#pragma once
// Socket set-up shared inside lib/rendezvous: the listening sockets (the
// rendezvous's, the reachability check's) and name resolution.
#include <cstdint>
#include <string>
#include <utility>

#include <netinet/in.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/detail/socket_option.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::rendezvous {

// Binds and listens on `bind` ("" host: every interface, IPv4 and IPv6 where
// the node has it; port 0: a free one); returns the port. Throws sgpu::Error.
int listen_on(boost::asio::ip::tcp::acceptor& acceptor, const Endpoint& bind);

// The same on every interface and `port`, the failure in `ec` rather than
// thrown: node 0's listener for the reachability check (reach_probe.cpp);
// with `share`, one of several on the port (SO_REUSEPORT).
void listen_everywhere(boost::asio::ip::tcp::acceptor& acceptor, unsigned short port, boost::system::error_code& ec,
                       bool share = false);

// How many connections one listen queue holds (net.core.somaxconn; 4096,
// the kernel's default since 5.4, when it cannot be read).
std::uint32_t listen_queue_limit();

// Takes the connections waiting in `acceptor`'s queue, without waiting, up
// to `most`, handing each to `take` (which returns false to stop). The error
// that stopped it (out of descriptors, a closed acceptor); none when the
// queue emptied, `most` were taken or `take` said stop. A peer gone before
// it was taken is skipped.
template <typename Take>
boost::system::error_code accept_waiting(boost::asio::ip::tcp::acceptor& acceptor, int most, Take&& take) {
  boost::system::error_code ec;
  if (!acceptor.non_blocking()) acceptor.non_blocking(true, ec);
  for (int taken = 0; !ec && taken < most; ++taken) {
    boost::asio::ip::tcp::socket socket(acceptor.get_executor());
    acceptor.accept(socket, ec);
    if (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again) return {};
    if (ec == boost::asio::error::connection_aborted) {
      ec = {};
      continue;
    }
    if (!ec && !take(std::move(socket))) return {};
  }
  return ec;
}

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

// asio::async_connect(socket, found, done), leaving from `source` when it is
// an address: bound first with no port (IP_BIND_ADDRESS_NO_PORT), so that the
// kernel picks the port at connect for this source's own 4-tuples. Agents on
// one machine, each from its own loopback address (the scale benchmark's
// simulator), then each find a port at once, as agents on their own hosts
// do; from one address the search for a free port grows with every
// connection open to the same destination. "" leaves the choice to the kernel.
template <typename Done>
void connect_from(boost::asio::ip::tcp::socket& socket, const boost::asio::ip::tcp::resolver::results_type& found,
                  const std::string& source, Done&& done) {
  using tcp = boost::asio::ip::tcp;
  boost::system::error_code ec;
  auto from = source.empty() ? boost::asio::ip::address() : boost::asio::ip::make_address(source, ec);
  if (source.empty() || ec) {
    boost::asio::async_connect(socket, found, std::forward<Done>(done));
    return;
  }
  tcp::endpoint to;
  for (const auto& entry : found)
    if (entry.endpoint().address().is_v4() == from.is_v4()) {
      to = entry.endpoint();
      break;
    }
  using no_port = boost::asio::detail::socket_option::boolean<IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT>;
  if (!socket.is_open()) socket.open(to.protocol(), ec);
  if (!ec && from.is_v4()) socket.set_option(no_port(true), ec);
  if (!ec) socket.bind(tcp::endpoint(from, 0), ec);
  if (ec) {
    boost::asio::post(socket.get_executor(), [done = std::forward<Done>(done), ec, to]() mutable { done(ec, to); });
    return;
  }
  socket.async_connect(to,
                       [done = std::forward<Done>(done), to](boost::system::error_code cec) mutable { done(cec, to); });
}

}  // namespace sgpu::rendezvous
