#include "reach_probe.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "listener.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/rendezvous/host_info.hpp"

namespace sgpu::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct ReachProbe::State {
  State(asio::io_context& io_, const Probe& p, Place pl, std::function<void(const ProbeResult&)> d)
      : io(io_), probe(p), place(std::move(pl)), done(std::move(d)), resolver(io_), socket(io_), timer(io_) {}
  asio::io_context& io;
  Probe probe;
  Place place;
  std::function<void(const ProbeResult&)> done;
  std::vector<std::unique_ptr<tcp::acceptor>> listeners;
  tcp::resolver resolver;
  tcp::socket socket;
  asio::steady_timer timer;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::string interface = route_interface(probe.master_addr);
  std::weak_ptr<State> self;
  bool answered = false;

  void answer(bool ok, std::string error) {
    if (answered) return;
    answered = true;
    timer.cancel();
    boost::system::error_code ignored;
    socket.close(ignored);  // connected: closed first on this side, so the wait (TIME_WAIT) is ours, not MASTER_PORT's
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
    ProbeResult r{ok, std::move(error), interface, static_cast<std::uint32_t>(us.count())};
    asio::post(io, [weak = self, r] {
      if (auto s = weak.lock(); s && s->done) s->done(r);  // not once the probe was dropped
    });
  }

  // Every other node connects at about the same moment, and the kernel drops
  // a connection that finds the listen queue (net.core.somaxconn) full: its
  // node would wait out a SYN retransmit, a second or more. So the port gets
  // as many listeners as it takes to queue them all (SO_REUSEPORT shares the
  // arrivals out among them), and each is drained as it fills.
  void listen() {
    boost::system::error_code ec;
    auto queue = listen_queue_limit();  // never 0
    // Twice what they need: SO_REUSEPORT shares arrivals out by a hash, not evenly.
    auto count = std::clamp<std::uint32_t>((2 * place.peers + queue - 1) / queue, 1, 64);
    for (std::uint32_t i = 0; i < count && !ec; ++i) {
      listeners.push_back(std::make_unique<tcp::acceptor>(io));
      listen_everywhere(*listeners.back(), static_cast<unsigned short>(probe.master_port), ec, count > 1);
    }
    answer(!ec, ec ? ec.message() : "");
    if (!ec)
      for (auto& l : listeners) drain(self, l.get());
  }

  // Each connection is taken off the listen queue and closed: all that wait
  // at each wake (up to a batch), not one per turn of the loop.
  static void drain(const std::weak_ptr<State>& weak, tcp::acceptor* listener) {
    auto s = weak.lock();
    if (!s || !listener->is_open()) return;
    listener->async_wait(tcp::acceptor::wait_read, [weak, listener](boost::system::error_code ec) {
      auto s2 = weak.lock();
      if (!s2 || !listener->is_open() || ec == asio::error::operation_aborted) return;
      constexpr int kBatch = 512;
      if (!ec)
        ec = accept_waiting(*listener, kBatch, [](tcp::socket peer) {
          boost::system::error_code ignored;
          peer.close(ignored);
          return true;
        });
      if (ec) {  // out of descriptors: the peers wait in the queue, connected; try again shortly
        auto pause = std::make_shared<asio::steady_timer>(s2->io, std::chrono::milliseconds(50));
        pause->async_wait([weak, listener, pause](boost::system::error_code tec) {
          if (!tec) drain(weak, listener);
        });
        return;
      }
      drain(weak, listener);
    });
  }

  void connect() {
    timer.expires_after(std::chrono::milliseconds(probe.timeout_ms));
    timer.async_wait([weak = self](boost::system::error_code ec) {
      auto s = weak.lock();
      if (ec || !s || s->answered) return;
      s->resolver.cancel();
      boost::system::error_code ignored;
      s->socket.close(ignored);
      s->answer(false, fmt::format("no answer in {} (a firewall?)",
                                   env::format_duration(std::chrono::milliseconds(s->probe.timeout_ms))));
    });
    resolve(resolver, probe.master_addr, static_cast<unsigned short>(probe.master_port),
            [weak = self](boost::system::error_code ec, const tcp::resolver::results_type& found) {
              auto s = weak.lock();
              if (!s || s->answered) return;
              if (ec) return s->answer(false, fmt::format("cannot resolve {}: {}", s->probe.master_addr, ec.message()));
              connect_from(s->socket, found, s->place.source,
                           [weak](boost::system::error_code cec, const tcp::endpoint&) {
                             auto s2 = weak.lock();
                             if (!s2 || s2->answered) return;
                             s2->answer(!cec, cec ? cec.message() : "");
                           });
            });
  }
};

ReachProbe::ReachProbe(asio::io_context& io, const Probe& probe, Place place,
                       std::function<void(const ProbeResult&)> done)
    : state_(std::make_shared<State>(io, probe, std::move(place), std::move(done))) {
  state_->self = state_;
  if (probe.listen)
    state_->listen();
  else
    state_->connect();
}

ReachProbe::~ReachProbe() {
  state_->done = nullptr;
  state_->answered = true;
  boost::system::error_code ignored;
  state_->timer.cancel();
  state_->resolver.cancel();
  state_->socket.close(ignored);
  for (auto& l : state_->listeners) l->close(ignored);
}

}  // namespace sgpu::rendezvous
