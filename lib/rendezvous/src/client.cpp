#include "sgpu/rendezvous/client.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "listener.hpp"
#include "reach_probe.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/rendezvous/framed_socket.hpp"

namespace sgpu::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

namespace {
constexpr auto kFirstRetry = std::chrono::milliseconds(100);
constexpr auto kMaxRetry = std::chrono::seconds(2);

std::string duration_text(std::chrono::milliseconds d) {
  return env::format_duration(std::chrono::duration_cast<env::Seconds>(d));
}
}  // namespace

struct RendezvousClient::Impl {
  enum class State { Connecting, Hello, AwaitWelcome, Joined, Preparing, Ready, Running, Closed };

  asio::io_context& io;
  ClientOptions options;
  Secret secret;
  ClientHandler& handler;
  tcp::resolver resolver;
  std::unique_ptr<tcp::socket> connecting;
  std::shared_ptr<FramedSocket> socket;
  asio::steady_timer join_deadline;
  asio::steady_timer retry_timer;
  asio::steady_timer liveness;
  asio::steady_timer heartbeat;
  std::shared_ptr<int> token = std::make_shared<int>(0);
  Nonce nonce{};
  State state = State::Connecting;
  std::chrono::milliseconds heartbeat_timeout;
  std::chrono::milliseconds retry_delay = kFirstRetry;
  std::string last_error = "no answer";
  std::unique_ptr<ReachProbe> probe;  // the reachability check, from its Probe to Start (node 0 listens meanwhile)
  std::string route;                  // the interface the check went out by
  std::uint32_t nnodes = 0;           // from the assignment: node 0's check listens for nnodes - 1 peers

  Impl(asio::io_context& io_, ClientOptions o, Secret s, ClientHandler& h)
      : io(io_),
        options(std::move(o)),
        secret(std::move(s)),
        handler(h),
        resolver(io_),
        join_deadline(io_),
        retry_timer(io_),
        liveness(io_),
        heartbeat(io_),
        heartbeat_timeout(options.hello_timeout) {}

  std::weak_ptr<int> guard() const { return token; }
  std::string where() const { return options.endpoint.str(); }

  void start() {
    join_deadline.expires_after(options.join_timeout);
    join_deadline.async_wait([this, g = guard()](boost::system::error_code ec) {
      if (ec || g.expired() || state > State::AwaitWelcome) return;
      end(fmt::format("cannot reach the rendezvous at {} within {} (--join-timeout): {}", where(),
                      duration_text(options.join_timeout), last_error),
          1);
    });
    connect();
  }

  void connect() {
    resolve(resolver, options.endpoint.host, static_cast<unsigned short>(options.endpoint.port),
            [this, g = guard()](boost::system::error_code ec, const tcp::resolver::results_type& results) {
              if (g.expired() || state != State::Connecting) return;
              if (ec) {
                retry(fmt::format("cannot resolve {}: {}", options.endpoint.host, ec.message()));
                return;
              }
              connecting = std::make_unique<tcp::socket>(io);
              connect_from(*connecting, results, options.source_address,
                           [this, g](boost::system::error_code cec, const tcp::endpoint&) {
                             if (g.expired() || state != State::Connecting) return;
                             if (cec) {
                               retry(cec.message());
                               return;
                             }
                             // Nothing listens yet on a port of the ephemeral range, and the
                             // kernel gave this socket that very port: TCP's simultaneous open
                             // connected it to itself, and it would read its own hello back.
                             boost::system::error_code lec;
                             boost::system::error_code rec;
                             if (connecting->local_endpoint(lec) == connecting->remote_endpoint(rec) && !lec && !rec) {
                               connecting->close(lec);
                               retry("Connection refused");
                               return;
                             }
                             connected();
                           });
            });
  }

  void retry(const std::string& why) {
    last_error = why;
    retry_timer.expires_after(retry_delay);
    retry_delay = std::min<std::chrono::milliseconds>(retry_delay * 2, kMaxRetry);
    retry_timer.async_wait([this, g = guard()](boost::system::error_code ec) {
      if (!ec && !g.expired() && state == State::Connecting) connect();
    });
  }

  void connected() {
    socket = std::make_shared<FramedSocket>(std::move(*connecting), kMaxHelloPayload);
    connecting.reset();
    state = State::Hello;
    socket->start([this](std::uint8_t type, std::string_view payload) { on_frame(type, payload); },
                  [this](const std::string& why) {
                    if (state == State::Hello)
                      return reconnect(
                          fmt::format("the connection ended before the "
                                      "launcher's hello: {}",
                                      why));
                    end(fmt::format("lost the launcher at {}: {}", where(), why), 1);
                  });
    nonce = make_nonce();
    socket->send(ClientHello{kProtocolVersion, nonce});
    arm_liveness();
  }

  void arm_liveness() {
    liveness.expires_at(socket->last_received() + heartbeat_timeout);
    liveness.async_wait([this, g = guard()](boost::system::error_code ec) {
      if (ec || g.expired() || state == State::Closed) return;
      if (SteadyClock::now() < socket->last_received() + heartbeat_timeout) {
        arm_liveness();
        return;
      }
      if (state == State::Hello)
        return reconnect(
            fmt::format("no hello from the launcher within {} of connecting", duration_text(heartbeat_timeout)));
      end(fmt::format("lost the launcher at {}: no message for {}", where(), duration_text(heartbeat_timeout)), 1);
    });
  }

  // Connected, and the launcher has said nothing: a launcher whose listen
  // queue was full when this connection came completes it only after the
  // kernel's SYN-ACK retries (1, 2, 4, 8 s...), or never. The connection is
  // dropped and made again, as a refused one is, until --join-timeout.
  void reconnect(const std::string& why) {
    liveness.cancel();
    if (auto old = std::exchange(socket, nullptr)) old->close();
    state = State::Connecting;
    retry(why);
  }

  void arm_heartbeat() {
    heartbeat.expires_after(heartbeat_timeout / 4);
    heartbeat.async_wait([this, g = guard()](boost::system::error_code ec) {
      if (ec || g.expired() || state == State::Closed) return;
      socket->send(Heartbeat{});
      arm_heartbeat();
    });
  }

  void stop_timers() {
    join_deadline.cancel();
    retry_timer.cancel();
    liveness.cancel();
    heartbeat.cancel();
  }

  // `flush`: the connection still works and what is queued (an Abort) should
  // reach the launcher; otherwise it is closed at once.
  void end(const std::string& why, int exit_code, bool flush = false) {
    if (state == State::Closed) return;
    state = State::Closed;
    probe.reset();
    stop_timers();
    resolver.cancel();
    if (connecting) connecting->close();
    if (socket && flush)
      socket->close_after_flush(std::chrono::seconds(1));
    else if (socket)
      socket->close();
    handler.on_lost(why, exit_code);
  }

  // The handler refused to go on: tell the launcher, then end.
  void abort(const Error& e) {
    socket->send(Abort{e.what(), e.exit_code()});
    end(e.what(), e.exit_code(), true);
  }

  void send_ready(const Ready& ready) {
    if (state != State::Preparing) return;
    state = State::Ready;
    socket->send(ready);
  }

  [[noreturn]] static void unexpected(const Message& m, const char* when) {
    throw ProtocolError(fmt::format("unexpected {} {}", type_name(type_of(m)), when));
  }

  void on_frame(std::uint8_t type, std::string_view payload) {
    auto m = decode(type, payload);
    if (const auto* reject = std::get_if<Reject>(&m)) {
      end(fmt::format("the launcher at {} refused this agent: {}", where(), reject->reason), kExitUsage);
      return;
    }
    if (const auto* abort = std::get_if<Abort>(&m)) {
      end(abort->message, abort->exit_code);
      return;
    }
    switch (state) {
      case State::Hello:
        return on_server_hello(m);
      case State::AwaitWelcome:
        return on_welcome(m);
      case State::Joined:
        if (std::holds_alternative<Heartbeat>(m)) return;
        if (const auto* assign = std::get_if<Assign>(&m)) {
          nnodes = assign->nnodes;
          std::optional<Ready> ready;
          state = State::Preparing;
          try {
            ready = handler.on_assign(*assign);
          } catch (const Error& e) {
            abort(e);
            return;
          }
          if (ready) send_ready(*ready);
          return;
        }
        unexpected(m, "before the assignment");
      case State::Preparing:
        if (std::holds_alternative<Heartbeat>(m)) return;
        if (std::holds_alternative<PreflightId>(m)) {
          handler.on_message(std::move(m));
          return;
        }
        unexpected(m, "while preparing");
      case State::Ready:
        if (std::holds_alternative<Heartbeat>(m)) return;
        if (const auto* asked = std::get_if<Probe>(&m)) {
          ReachProbe::Place place{options.source_address, nnodes > 0 ? nnodes - 1 : 0};
          probe = std::make_unique<ReachProbe>(io, *asked, place, [this](const ProbeResult& r) {
            route = r.interface;
            if (state == State::Ready) socket->send(r);
          });
          return;
        }
        if (const auto* start = std::get_if<Start>(&m)) {
          probe.reset();  // MASTER_PORT is free again before any rank binds it
          state = State::Running;
          handler.on_start(*start);
          return;
        }
        if (std::holds_alternative<Restart>(m)) {  // a spare in a lost node's place: its first start
          state = State::Running;
          handler.on_message(std::move(m));
          return;
        }
        if (std::holds_alternative<Finish>(m)) {  // the launcher needed only the preparation (--preflight-only)
          handler.on_message(std::move(m));
          return;
        }
        unexpected(m, "before the start");
      case State::Running:
        if (std::holds_alternative<Heartbeat>(m)) return;
        if (std::holds_alternative<Signal>(m) || std::holds_alternative<Finish>(m) ||
            std::holds_alternative<Restart>(m) || std::holds_alternative<Inspect>(m)) {
          handler.on_message(std::move(m));
          return;
        }
        unexpected(m, "during the run");
      case State::Connecting:
      case State::Closed:
        return;
    }
  }

  void on_server_hello(const Message& m) {
    const auto* hello = std::get_if<ServerHello>(&m);
    if (hello == nullptr) unexpected(m, "before the launcher's hello");
    if (hello->version != kProtocolVersion) {
      end(fmt::format("the launcher at {} speaks rendezvous protocol version {}, this agent speaks {}: run the same "
                      "sgpu version on every node",
                      where(), hello->version, kProtocolVersion),
          kExitUsage);
      return;
    }
    if (!proof_matches(server_proof(secret, nonce, hello->nonce), hello->proof)) {
      end(fmt::format("the launcher at {} does not know this run's secret: check {} or --rdzv-secret-file on this "
                      "node and the launcher's",
                      where(), kSecretEnvVar),
          kExitUsage);
      return;
    }
    // The launcher has proven the secret: its next frame, the Welcome, carries
    // the whole job description and may be far larger than a hello.
    socket->set_max_payload(kMaxPayload);
    socket->send(Auth{client_proof(secret, hello->nonce, nonce)});
    state = State::AwaitWelcome;
  }

  void on_welcome(const Message& m) {
    const auto* welcome = std::get_if<Welcome>(&m);
    if (welcome == nullptr) unexpected(m, "before the welcome");
    join_deadline.cancel();
    if (welcome->heartbeat_timeout_ms > 0) heartbeat_timeout = std::chrono::milliseconds(welcome->heartbeat_timeout_ms);
    arm_liveness();  // from now on the launcher's heartbeat timeout, not the hello's
    arm_heartbeat();
    Join join;
    try {
      join = handler.on_welcome(*welcome);
    } catch (const Error& e) {
      abort(e);
      return;
    }
    state = State::Joined;
    socket->send(join);
  }
};

RendezvousClient::RendezvousClient(asio::io_context& io, ClientOptions options, Secret secret, ClientHandler& handler)
    : impl_(std::make_unique<Impl>(io, std::move(options), std::move(secret), handler)) {}

RendezvousClient::~RendezvousClient() {
  auto& s = *impl_;
  s.stop_timers();
  // A socket still flushing its last frames (Abort, after Finish) is left to
  // finish on its own; it no longer calls back into this client.
  if (s.socket && s.socket->is_open()) s.socket->close();
  if (s.connecting) s.connecting->close();
}

void RendezvousClient::start() { impl_->start(); }

void RendezvousClient::send(const Message& message) {
  if (impl_->socket && impl_->state != Impl::State::Closed) impl_->socket->send(message);
}

void RendezvousClient::ready(const Ready& ready) {
  if (impl_->socket) impl_->send_ready(ready);
}

const std::string& RendezvousClient::route() const { return impl_->route; }

void RendezvousClient::close() {
  auto& s = *impl_;
  if (s.state == Impl::State::Closed) return;
  s.state = Impl::State::Closed;
  s.probe.reset();
  s.stop_timers();
  if (s.socket) s.socket->close_after_flush(std::chrono::seconds(1));
}

}  // namespace sgpu::rendezvous
