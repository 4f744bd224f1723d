#include "listener.hpp"

#include <sys/socket.h>

#include <cstdio>
#include <limits>

#include <fmt/format.h>
#include <boost/asio/detail/socket_option.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/v6_only.hpp>

#include "sgpu/env/error.hpp"

namespace sgpu::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {
// `ep`, or with `everywhere` every interface (IPv6 and IPv4 where the node has it).
void listen_at(tcp::acceptor& acceptor, tcp::endpoint ep, bool everywhere, boost::system::error_code& ec,
               bool share = false) {
  acceptor.open(ep.protocol(), ec);
  if (ec && everywhere) {  // no IPv6 on this node
    ep = tcp::endpoint(tcp::v4(), ep.port());
    acceptor.open(ep.protocol(), ec);
  }
  if (!ec && ep.protocol() == tcp::v6()) acceptor.set_option(asio::ip::v6_only(false), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && share) acceptor.set_option(asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  // The kernel caps the queue at net.core.somaxconn: asking for the most an
  // int holds makes a raised sysctl count (asio's SOMAXCONN stops at 4096).
  if (!ec) acceptor.listen(std::numeric_limits<int>::max(), ec);
}
}  // namespace

void listen_everywhere(tcp::acceptor& acceptor, unsigned short port, boost::system::error_code& ec, bool share) {
  listen_at(acceptor, tcp::endpoint(tcp::v6(), port), true, ec, share);
}

std::uint32_t listen_queue_limit() {
  std::uint32_t limit = 4096;
  if (std::FILE* f = std::fopen("/proc/sys/net/core/somaxconn", "re")) {
    unsigned value = 0;
    if (std::fscanf(f, "%u", &value) == 1 && value > 0) limit = value;
    std::fclose(f);
  }
  return limit;
}

int listen_on(tcp::acceptor& acceptor, const Endpoint& bind) {
  boost::system::error_code ec;
  auto port = static_cast<unsigned short>(bind.port);
  tcp::endpoint ep(tcp::v6(), port);
  if (!bind.host.empty()) {
    auto addr = asio::ip::make_address(bind.host, ec);
    if (ec) throw Error(fmt::format("rendezvous address {}: not an IP address", bind.host));
    ep = tcp::endpoint(addr, port);
  }
  listen_at(acceptor, ep, bind.host.empty(), ec);
  if (ec)
    throw Error(fmt::format("cannot listen for the rendezvous on {}: {}",
                            Endpoint{bind.host.empty() ? "*" : bind.host, bind.port}.str(), ec.message()),
                bind.port != 0 ? kExitUsage : 1);
  return acceptor.local_endpoint(ec).port();
}

}  // namespace sgpu::rendezvous
