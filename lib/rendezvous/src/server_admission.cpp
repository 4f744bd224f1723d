// The rendezvous server's admission: who may take part. Every peer is
// accepted (or, out of descriptors, left in the listen queue for a while),
// must say a hello of this protocol version and prove the run's secret within
// the heartbeat timeout, and is refused otherwise (one line per reason,
// RefusalLog); once in, it stays while frames keep coming.
#include <algorithm>
#include <cerrno>

#include "listener.hpp"
#include "server_impl.hpp"

namespace sgpu::rendezvous {

namespace {
// accept() failing (for want of descriptors or memory, or anything else)
// would fail again at once (the peer stays queued): wait this long first.
constexpr auto kAcceptPause = std::chrono::milliseconds(200);
constexpr int kAcceptBatch = 512;

}  // namespace

RendezvousServer::Impl::Impl(asio::io_context& io_, const Endpoint& bind, Secret s, ServerOptions o, ServerHandler& h)
    : io(io_),
      secret(std::move(s)),
      options(std::move(o)),
      handler(h),
      acceptor(io_),
      join_timer(io_),
      heartbeat_timer(io_),
      accept_pause(io_) {
  bound_port = listen_on(acceptor, bind);
}

// Each time the listen queue has peers, up to kAcceptBatch of them are
// taken at once, before the loop turns to anything else: one accept per
// turn of the loop, behind every other peer's frames, let 16384 agents
// arriving together overflow the queue (net.core.somaxconn, 4096), and the
// kernel's dropped connections came back only after a second or more.
void RendezvousServer::Impl::accept() {
  acceptor.async_wait(tcp::acceptor::wait_read, [this, g = guard()](boost::system::error_code ec) {
    if (g.expired() || phase == Phase::Stopped || phase == Phase::Finishing) return;
    if (ec == asio::error::operation_aborted) return;
    bool full = false;
    if (!ec)
      ec = accept_waiting(acceptor, kAcceptBatch, [&](tcp::socket socket) {
        accept_paused_said = false;
        on_accept(std::move(socket));
        if (g.expired() || phase == Phase::Stopped || phase == Phase::Finishing) return false;
        full = unauthenticated >= admission_limit();
        return !full;
      });
    if (g.expired() || phase == Phase::Stopped || phase == Phase::Finishing || !acceptor.is_open()) return;
    if (full) return hold_accepting();
    if (ec) {  // out of descriptors or memory, or the unforeseen: a pause, never a spin
      pause_accepting(ec);
      return;
    }
    accept();
  });
}

// At most this many peers wait to authenticate at once: never fewer than the
// job has nodes, so that a legitimate start of 16384 agents at one moment is
// never held back.
std::size_t RendezvousServer::Impl::admission_limit() const {
  return std::max<std::size_t>(options.max_unauthenticated, options.nnodes + 64);
}

// At the limit, the next peers wait in the kernel's listen queue (their
// connect is slow, never reset) until some authenticate or time out.
void RendezvousServer::Impl::hold_accepting() {
  accept_held = true;
  if (!std::exchange(accept_held_said, true))
    handler.on_notice(
        fmt::format("{} rendezvous connections are waiting to authenticate (the most at once); new "
                    "ones wait in the listen queue until these authenticate or time out after {}",
                    unauthenticated, seconds_text(options.heartbeat_timeout)));
}

// One peer less waits to authenticate (it did, or it is gone).
void RendezvousServer::Impl::left_unauthenticated() {
  --unauthenticated;
  if (accept_held && unauthenticated < admission_limit() && phase != Phase::Stopped && phase != Phase::Finishing) {
    accept_held = false;
    accept();
  }
}

// Out of descriptors (a flood, or many nodes against a low limit): retrying
// at once spun a core. The peers wait in the listen queue meanwhile, and
// descriptors come back as unauthenticated ones time out.
void RendezvousServer::Impl::pause_accepting(const boost::system::error_code& ec) {
  if (!std::exchange(accept_paused_said, true))
    handler.on_notice(fmt::format("cannot accept rendezvous connections for now: {}; retrying every {}ms", ec.message(),
                                  kAcceptPause.count()));
  accept_pause.expires_after(kAcceptPause);
  accept_pause.async_wait([this, g = guard()](boost::system::error_code e) {
    if (e || g.expired() || phase == Phase::Stopped || phase == Phase::Finishing) return;
    accept();
  });
}

// What a peer that has not authenticated caused: one line per reason, then
// counted (RefusalLog); an authenticated one's always.
void RendezvousServer::Impl::notice(const Peer& p, const std::string& reason, const std::string& text) {
  if (p.authenticated() || refusals.add(p.socket->peer_address(), reason)) handler.on_notice(text);
}

void RendezvousServer::Impl::say_unsaid_refusals() {
  auto line = refusals.take_unsaid();
  if (!line.empty()) handler.on_notice(line);
}

void RendezvousServer::Impl::on_accept(tcp::socket socket) {
  auto fs = std::make_shared<FramedSocket>(std::move(socket), kMaxHelloPayload);
  auto peer = std::make_unique<Peer>(io);
  peer->id = next_id++;
  peer->socket = fs;
  peer->accepted = SteadyClock::now();
  auto id = peer->id;
  ++unauthenticated;
  peers.emplace(id, std::move(peer));
  fs->start([this, id](std::uint8_t type, std::string_view payload) { on_frame(id, type, payload); },
            [this, id](const std::string& why) { on_closed(id, why); });
  arm_liveness(*peers.at(id));
}

// Before authentication the deadline runs from the accept and nothing the
// peer sends moves it (a client that dribbles bytes is still dropped);
// after, it runs from the last frame received.
SteadyClock::time_point RendezvousServer::Impl::deadline(const Peer& p) const {
  return (p.authenticated() ? p.socket->last_received() : p.accepted) + options.heartbeat_timeout;
}

void RendezvousServer::Impl::arm_liveness(Peer& p) {
  p.liveness.expires_at(deadline(p));
  p.liveness.async_wait([this, g = guard(), id = p.id](boost::system::error_code ec) {
    if (ec || g.expired()) return;
    auto it = peers.find(id);
    if (it == peers.end()) return;
    auto& peer = *it->second;
    if (SteadyClock::now() < deadline(peer)) {
      arm_liveness(peer);
      return;
    }
    if (!peer.authenticated()) {
      auto reason = fmt::format("no authenticated hello within {}", seconds_text(options.heartbeat_timeout));
      notice(peer, reason, fmt::format("refused rendezvous peer {}: {}", peer.socket->peer(), reason));
      erase(peer);
      return;
    }
    lost(peer, fmt::format("no message for {} (--heartbeat-timeout)", seconds_text(options.heartbeat_timeout)));
  });
}

void RendezvousServer::Impl::arm_heartbeat() {
  heartbeat_timer.expires_after(options.heartbeat_timeout / 4);
  heartbeat_timer.async_wait([this, g = guard()](boost::system::error_code ec) {
    if (ec || g.expired() || phase == Phase::Stopped || phase == Phase::Finishing) return;
    for (auto& [id, p] : peers)
      if (p->authenticated()) p->socket->send(Heartbeat{});
    arm_heartbeat();
  });
}

void RendezvousServer::Impl::erase(Peer& p) {
  if (!p.authenticated()) left_unauthenticated();
  p.liveness.cancel();
  p.socket->close();
  forget_join(p);
  peers.erase(p.id);  // p is gone after this line
}

// A peer refused before it took part: log, tell it why if it can read us, close.
// `why`: the notice's reason, without the peer.
void RendezvousServer::Impl::refuse(Peer& p, const std::string& why, const std::string& reason) {
  notice(p, why, fmt::format("refused rendezvous peer {}: {}", p.socket->peer(), why));
  refuse_quietly(p, reason);
}

// Tells the peer why if it can read us, and closes.
void RendezvousServer::Impl::refuse_quietly(Peer& p, const std::string& reason) {
  p.socket->send(Reject{kProtocolVersion, reason});
  p.socket->close_after_flush(std::chrono::milliseconds(200));
  if (!p.authenticated()) left_unauthenticated();
  p.state = State::Done;  // never counted again
  p.liveness.cancel();
  forget_join(p);
  auto socket = p.socket;
  peers.erase(p.id);
}

void RendezvousServer::Impl::unexpected(const Message& m, const char* when) {
  throw ProtocolError(fmt::format("unexpected {} {}", type_name(type_of(m)), when));
}

void RendezvousServer::Impl::on_hello(Peer& p, const Message& m) {
  const auto* hello = std::get_if<ClientHello>(&m);
  if (hello == nullptr) unexpected(m, "before the hello");
  if (hello->version != kProtocolVersion) {
    refuse(p, fmt::format("it speaks protocol version {}, this launcher speaks {}", hello->version, kProtocolVersion),
           fmt::format("this launcher speaks rendezvous protocol version {}, the agent {}: run the same sgpu "
                       "version on every node",
                       kProtocolVersion, hello->version));
    return;
  }
  p.client_nonce = hello->nonce;
  p.server_nonce = make_nonce();
  p.socket->send(ServerHello{kProtocolVersion, p.server_nonce, server_proof(secret, p.client_nonce, p.server_nonce)});
  p.state = State::Auth;
}

void RendezvousServer::Impl::on_auth(Peer& p, const Message& m) {
  const auto* auth = std::get_if<Auth>(&m);
  if (auth == nullptr) unexpected(m, "before authentication");
  if (!proof_matches(client_proof(secret, p.server_nonce, p.client_nonce), auth->proof)) {
    refuse(p, "it does not know the run's secret", "authentication failed: this agent does not have the run's secret");
    return;
  }
  // During the run only a spare is let in, while a lost node's place is open (readmit).
  if (phase != Phase::Joining && !(phase == Phase::Running && !readmitting.empty())) {
    refuse(p, "the rendezvous is already complete",
           "the rendezvous is already complete: every node of this run has joined");
    return;
  }
  left_unauthenticated();
  p.state = State::Join;
  p.socket->set_max_payload(kMaxPayload);
  p.socket->send(Welcome{options.run_id, options.nnodes, static_cast<std::uint32_t>(options.heartbeat_timeout.count()),
                         options.job});
}

}  // namespace sgpu::rendezvous
