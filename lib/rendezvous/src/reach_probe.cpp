#include "reach_probe.hpp"

#include <chrono>
#include <optional>
#include <string>

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
  State(asio::io_context& io_, const Probe& p, std::function<void(const ProbeResult&)> d)
      : io(io_), probe(p), done(std::move(d)), resolver(io_), socket(io_), timer(io_) {}
  asio::io_context& io;
  Probe probe;
  std::function<void(const ProbeResult&)> done;
  std::optional<tcp::acceptor> listener;
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

  void listen() {
    boost::system::error_code ec;
    listener.emplace(io);
    listen_everywhere(*listener, static_cast<unsigned short>(probe.master_port), ec);
    answer(!ec, ec ? ec.message() : "");
    if (!ec) drain(self);
  }

  // Every other node connects once: each connection is taken off the listen
  // queue and closed, so that a queue of somaxconn (4096 here) never fills and
  // the 4097th node's connect is never dropped into a 5 s "no answer".
  static void drain(const std::weak_ptr<State>& weak) {
    auto s = weak.lock();
    if (!s || !s->listener || !s->listener->is_open()) return;
    s->listener->async_accept([weak](boost::system::error_code ec, tcp::socket peer) {
      boost::system::error_code ignored;
      peer.close(ignored);
      if (ec == asio::error::operation_aborted) return;
      if (ec) {  // out of descriptors: the peers wait in the queue, connected; try again shortly
        auto s2 = weak.lock();
        if (!s2) return;
        s2->timer.expires_after(std::chrono::milliseconds(50));
        s2->timer.async_wait([weak](boost::system::error_code tec) {
          if (!tec) drain(weak);
        });
        return;
      }
      drain(weak);
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
              asio::async_connect(s->socket, found, [weak](boost::system::error_code cec, const tcp::endpoint&) {
                auto s2 = weak.lock();
                if (!s2 || s2->answered) return;
                s2->answer(!cec, cec ? cec.message() : "");
              });
            });
  }
};

ReachProbe::ReachProbe(asio::io_context& io, const Probe& probe, std::function<void(const ProbeResult&)> done)
    : state_(std::make_shared<State>(io, probe, std::move(done))) {
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
  if (state_->listener) state_->listener->close(ignored);
}

}  // namespace sgpu::rendezvous
