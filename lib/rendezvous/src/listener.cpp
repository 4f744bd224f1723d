#include "listener.hpp"

#include <fmt/format.h>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>

#include "sgpu/env/error.hpp"

namespace sgpu::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

int listen_on(tcp::acceptor& acceptor, const Endpoint& bind) {
  boost::system::error_code ec;
  auto port = static_cast<unsigned short>(bind.port);
  tcp::endpoint ep;
  if (bind.host.empty()) {
    ep = tcp::endpoint(tcp::v6(), port);
  } else {
    auto addr = asio::ip::make_address(bind.host, ec);
    if (ec) throw Error(fmt::format("rendezvous address {}: not an IP address", bind.host));
    ep = tcp::endpoint(addr, port);
  }
  acceptor.open(ep.protocol(), ec);
  if (ec && bind.host.empty()) {  // no IPv6 on this node
    ep = tcp::endpoint(tcp::v4(), port);
    acceptor.open(ep.protocol(), ec);
  }
  if (!ec && ep.protocol() == tcp::v6()) acceptor.set_option(asio::ip::v6_only(false), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw Error(fmt::format("cannot listen for the rendezvous on {}: {}",
                            Endpoint{bind.host.empty() ? "*" : bind.host, bind.port}.str(), ec.message()),
                bind.port != 0 ? kExitUsage : 1);
  return acceptor.local_endpoint(ec).port();
}

}  // namespace sgpu::rendezvous
