#pragma once
// Opens the rendezvous's listening socket (internal to lib/rendezvous).
#include <boost/asio/ip/tcp.hpp>

#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::rendezvous {

// Binds and listens on `bind` ("" host: every interface, IPv4 and IPv6 where
// the node has it; port 0: a free one); returns the port. Throws sgpu::Error.
int listen_on(boost::asio::ip::tcp::acceptor& acceptor, const Endpoint& bind);

// The same on every interface and `port`, the failure in `ec` rather than
// thrown: node 0's listener for the reachability check (reach_probe.cpp).
void listen_everywhere(boost::asio::ip::tcp::acceptor& acceptor, unsigned short port, boost::system::error_code& ec);

}  // namespace sgpu::rendezvous
