#include "sgpu/rendezvous/server.hpp"

#include <unistd.h>
#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "listener.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/rendezvous/assignment.hpp"
#include "sgpu/rendezvous/framed_socket.hpp"
#include "sgpu/rendezvous/refusals.hpp"

namespace sgpu::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

namespace {
constexpr auto kLinger = std::chrono::seconds(2);
// accept() failing for want of descriptors or memory would fail again at once
// (the peer stays queued): wait this long before the next try.
constexpr auto kAcceptPause = std::chrono::milliseconds(200);

bool out_of_resources(const boost::system::error_code& ec) {
  return ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space || ec == asio::error::no_memory ||
         ec.value() == ENFILE;
}

std::string seconds_text(std::chrono::milliseconds d) {
  return env::format_duration(std::chrono::duration_cast<env::Seconds>(d));
}
}  // namespace

struct RendezvousServer::Impl {
  enum class Phase { Joining, Preparing, Running, Finishing, Stopped };
  enum class State { Hello, Auth, Join, Joined, Assigned, Ready, Running, Done };

  struct Peer {
    std::uint64_t id = 0;
    std::shared_ptr<FramedSocket> socket;
    State state = State::Hello;
    Nonce client_nonce{};
    Nonce server_nonce{};
    Join join;
    std::uint32_t node_rank = 0;
    std::uint32_t rank_base = 0;
    std::uint32_t master_port = 0;
    std::string preflight;   // Ready's report
    bool lost_said = false;  // on_node_lost was called for it
    SteadyClock::time_point accepted;
    asio::steady_timer liveness;
    explicit Peer(asio::io_context& io) : liveness(io) {}
    bool authenticated() const { return state >= State::Join; }
    std::string label() const {
      return join.name.empty() ? socket->peer() : fmt::format("{} ({})", join.name, socket->peer());
    }
  };

  asio::io_context& io;
  Secret secret;
  ServerOptions options;
  ServerHandler& handler;
  tcp::acceptor acceptor;
  asio::steady_timer join_timer;
  asio::steady_timer heartbeat_timer;
  asio::steady_timer accept_pause;
  bool accept_paused_said = false;                        // once per stretch of failed accepts
  RefusalLog refusals;                                    // peers refused before they authenticated
  std::shared_ptr<int> token = std::make_shared<int>(0);  // handlers check it is still alive
  std::unordered_map<std::uint64_t, std::unique_ptr<Peer>> peers;
  std::vector<Peer*> joined;       // arrival order, until assignment
  std::vector<Join> joined_joins;  // their joins, side by side: checked on every join without copying
  std::vector<Peer*> nodes;        // by node rank, after assignment
  std::uint64_t next_id = 1;
  std::size_t unauthenticated = 0;
  std::size_t ready = 0;
  int bound_port = 0;
  Phase phase = Phase::Joining;

  Impl(asio::io_context& io_, const Endpoint& bind, Secret s, ServerOptions o, ServerHandler& h)
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

  std::weak_ptr<int> guard() const { return token; }

  void start() {
    accept();
    join_timer.expires_after(options.join_timeout);
    join_timer.async_wait([this, g = guard()](boost::system::error_code ec) {
      if (ec || g.expired()) return;
      on_join_timeout();
    });
    arm_heartbeat();
  }

  void accept() {
    acceptor.async_accept([this, g = guard()](boost::system::error_code ec, tcp::socket socket) {
      if (g.expired() || phase == Phase::Stopped || phase == Phase::Finishing) return;
      if (ec == asio::error::operation_aborted) return;
      if (out_of_resources(ec)) {
        pause_accepting(ec);
        return;
      }
      if (!ec) {
        accept_paused_said = false;
        on_accept(std::move(socket));
      }
      accept();
    });
  }

  // Out of descriptors (a flood, or many nodes against a low limit): retrying
  // at once spun a core. The peers wait in the listen queue meanwhile, and
  // descriptors come back as unauthenticated ones time out.
  void pause_accepting(const boost::system::error_code& ec) {
    if (!std::exchange(accept_paused_said, true))
      handler.on_notice(fmt::format("cannot accept rendezvous connections for now: {}; retrying every {}ms",
                                    ec.message(), kAcceptPause.count()));
    accept_pause.expires_after(kAcceptPause);
    accept_pause.async_wait([this, g = guard()](boost::system::error_code e) {
      if (e || g.expired() || phase == Phase::Stopped || phase == Phase::Finishing) return;
      accept();
    });
  }

  // What a peer that has not authenticated caused: one line per reason, then
  // counted (RefusalLog); an authenticated one's always.
  void notice(const Peer& p, const std::string& reason, const std::string& text) {
    if (p.authenticated() || refusals.add(p.socket->peer_address(), reason)) handler.on_notice(text);
  }

  void say_unsaid_refusals() {
    auto line = refusals.take_unsaid();
    if (!line.empty()) handler.on_notice(line);
  }

  void on_accept(tcp::socket socket) {
    auto fs = std::make_shared<FramedSocket>(std::move(socket), kMaxHelloPayload);
    if (unauthenticated >= options.max_unauthenticated) {
      if (refusals.add(fs->peer_address(), "too many connections waiting to authenticate"))
        handler.on_notice(fmt::format("refused rendezvous peer {}: {} connections are already waiting to authenticate",
                                      fs->peer(), unauthenticated));
      fs->close();
      return;
    }
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
  SteadyClock::time_point deadline(const Peer& p) const {
    return (p.authenticated() ? p.socket->last_received() : p.accepted) + options.heartbeat_timeout;
  }

  void arm_liveness(Peer& p) {
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

  void arm_heartbeat() {
    heartbeat_timer.expires_after(options.heartbeat_timeout / 4);
    heartbeat_timer.async_wait([this, g = guard()](boost::system::error_code ec) {
      if (ec || g.expired() || phase == Phase::Stopped || phase == Phase::Finishing) return;
      for (auto& [id, p] : peers)
        if (p->authenticated()) p->socket->send(Heartbeat{});
      arm_heartbeat();
    });
  }

  void erase(Peer& p) {
    if (!p.authenticated()) --unauthenticated;
    p.liveness.cancel();
    p.socket->close();
    forget_join(p);
    peers.erase(p.id);  // p is gone after this line
  }

  // A peer refused before it took part: log, tell it why if it can read us, close.
  // `why`: the notice's reason, without the peer.
  void refuse(Peer& p, const std::string& why, const std::string& reason) {
    notice(p, why, fmt::format("refused rendezvous peer {}: {}", p.socket->peer(), why));
    refuse_quietly(p, reason);
  }

  // Tells the peer why if it can read us, and closes.
  void refuse_quietly(Peer& p, const std::string& reason) {
    p.socket->send(Reject{kProtocolVersion, reason});
    p.socket->close_after_flush(std::chrono::milliseconds(200));
    if (!p.authenticated()) --unauthenticated;
    p.state = State::Done;  // never counted again
    p.liveness.cancel();
    forget_join(p);
    auto socket = p.socket;
    peers.erase(p.id);
  }

  void forget_join(Peer& p) {
    auto it = std::find(joined.begin(), joined.end(), &p);
    if (it == joined.end()) return;
    joined_joins.erase(joined_joins.begin() + (it - joined.begin()));
    joined.erase(it);
  }

  void drop(Peer& p, const std::string& notice) {
    handler.on_notice(notice);
    erase(p);
  }

  // A joined node's connection is gone.
  void lost(Peer& p, const std::string& why) {
    switch (p.state) {
      case State::Hello:
      case State::Auth: {
        auto reason = fmt::format("went away before authenticating ({})", why);
        notice(p, reason, fmt::format("rendezvous peer {} went away before authenticating: {}", p.socket->peer(), why));
        erase(p);
        return;
      }
      case State::Join:
        drop(p, fmt::format("rendezvous peer {} went away before joining: {}", p.socket->peer(), why));
        return;
      case State::Joined:
        drop(p, fmt::format("node {} left before the rendezvous completed: {}", p.label(), why));
        if (options.nnodes > 0) handler.on_joined(joined.size(), options.nnodes);
        return;
      case State::Assigned:
      case State::Ready: {
        auto message =
            fmt::format("node {} (node rank {}) was lost during the rendezvous: {}", p.label(), p.node_rank, why);
        fail(message, 1);
        return;
      }
      case State::Running: {
        p.liveness.cancel();
        p.socket->close();
        p.state = State::Done;
        p.lost_said = true;
        handler.on_node_lost(p.node_rank, why);
        return;
      }
      case State::Done: {
        p.liveness.cancel();
        p.socket->close();
        // A node that finished its attempt and is gone before the run is
        // over cannot take part in a restart: the launcher decides.
        if (phase != Phase::Running || p.lost_said) return;
        p.lost_said = true;
        handler.on_node_lost(p.node_rank, why);
        return;
      }
    }
  }

  void on_closed(std::uint64_t id, const std::string& why) {
    auto it = peers.find(id);
    if (it == peers.end()) return;
    lost(*it->second, why);
  }

  void on_frame(std::uint64_t id, std::uint8_t raw_type, std::string_view payload) {
    auto it = peers.find(id);
    if (it == peers.end()) return;
    auto& p = *it->second;
    auto message = decode(raw_type, payload);  // ProtocolError closes this connection
    switch (p.state) {
      case State::Hello:
        return on_hello(p, message);
      case State::Auth:
        return on_auth(p, message);
      case State::Join:
        return on_join(p, std::move(message));
      case State::Joined:
      case State::Assigned:
      case State::Ready:
        return on_preparing(p, std::move(message));
      case State::Running:
      case State::Done:
        return on_running(p, std::move(message));
    }
  }

  [[noreturn]] static void unexpected(const Message& m, const char* when) {
    throw ProtocolError(fmt::format("unexpected {} {}", type_name(type_of(m)), when));
  }

  void on_hello(Peer& p, const Message& m) {
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

  void on_auth(Peer& p, const Message& m) {
    const auto* auth = std::get_if<Auth>(&m);
    if (auth == nullptr) unexpected(m, "before authentication");
    if (!proof_matches(client_proof(secret, p.server_nonce, p.client_nonce), auth->proof)) {
      refuse(p, "it does not know the run's secret",
             "authentication failed: this agent does not have the run's secret");
      return;
    }
    if (phase != Phase::Joining) {
      refuse(p, "the rendezvous is already complete",
             "the rendezvous is already complete: every node of this run has joined");
      return;
    }
    --unauthenticated;
    p.state = State::Join;
    p.socket->set_max_payload(kMaxPayload);
    p.socket->send(Welcome{options.run_id, options.nnodes,
                           static_cast<std::uint32_t>(options.heartbeat_timeout.count()), options.job});
  }

  void on_join(Peer& p, Message&& m) {
    auto* join = std::get_if<Join>(&m);
    if (join == nullptr) {
      if (std::holds_alternative<Heartbeat>(m)) return;
      if (const auto* abort = std::get_if<Abort>(&m)) {
        fail(abort->message, abort->exit_code);  // the agent's message names its node
        return;
      }
      unexpected(m, "before the join");
    }
    if (join->name.empty()) join->name = join->hostname.empty() ? p.socket->peer_address() : join->hostname;
    auto check = check_join(joined_joins, *join, options.nnodes);
    switch (check.kind) {
      case JoinCheck::Kind::Refuse:
        handler.on_notice(fmt::format("refused node {} ({}): {}", join->name, p.socket->peer(), check.message));
        refuse_quietly(p, check.message);
        return;
      case JoinCheck::Kind::Conflict:
        fail(check.message, kExitUsage);
        return;
      case JoinCheck::Kind::Accept:
        break;
    }
    p.join = std::move(*join);
    p.state = State::Joined;
    joined.push_back(&p);
    joined_joins.push_back(p.join);
    handler.on_joined(joined.size(), options.nnodes);
    if (joined.size() == options.nnodes) assign();
  }

  void assign() {
    auto ranks = assign_node_ranks(joined_joins, options.nnodes);
    nodes.assign(options.nnodes, nullptr);
    for (std::size_t i = 0; i < joined.size(); ++i) {
      joined[i]->node_rank = ranks[i];
      nodes[ranks[i]] = joined[i];
    }
    std::vector<std::string> names;
    for (const auto* n : nodes) names.push_back(n->join.name);
    names = distinct_node_names(names);
    for (std::size_t r = 0; r < nodes.size(); ++r) nodes[r]->join.name = names[r];
    std::vector<std::uint32_t> local;
    for (const auto* n : nodes) local.push_back(n->join.local_ranks);
    auto bases = rank_bases(local);
    auto world = bases.back() + local.back();
    phase = Phase::Preparing;
    for (auto* n : nodes) {
      n->state = State::Assigned;
      n->rank_base = bases[n->node_rank];
      n->socket->send(Assign{n->node_rank, options.nnodes, n->rank_base, world});
    }
    joined.clear();
    joined_joins.clear();
  }

  void on_preparing(Peer& p, Message&& m) {
    if (std::holds_alternative<Heartbeat>(m)) return;
    if (const auto* abort = std::get_if<Abort>(&m)) {
      fail(abort->message, abort->exit_code);
      return;
    }
    if (const auto* id = std::get_if<PreflightId>(&m)) {
      // Node 0's NCCL id for the preflight, to every other node (which may
      // have said Ready already only if its own part failed).
      if (p.node_rank != 0 || p.state != State::Assigned) unexpected(m, "from a node other than 0");
      for (auto* n : nodes) {
        if (n != &p) n->socket->send(*id);
      }
      return;
    }
    auto* r = std::get_if<Ready>(&m);
    if (r == nullptr || p.state != State::Assigned) unexpected(m, "while preparing");
    p.master_port = r->master_port;
    p.preflight = std::move(r->preflight);
    p.state = State::Ready;
    if (p.node_rank == 0 && (r->master_port == 0 || r->master_port > 65535))
      throw ProtocolError(fmt::format("node 0 reported MASTER_PORT {}", r->master_port));
    ++ready;
    if (auto word = handler.on_node_ready(info(p), ready, options.nnodes)) {
      if (const auto* refused = std::get_if<Abort>(&*word)) {
        fail(refused->message, refused->exit_code);
        return;
      }
      const auto& done = std::get<Finish>(*word);  // the launcher needs no more than the preparation
      phase = Phase::Stopped;
      close_all(&*word);
      handler.on_failed(done.summary, done.exit_code);
      return;
    }
    if (ready == options.nnodes) start_all();
  }

  NodeInfo info(const Peer& n) const {
    return NodeInfo{n.node_rank,      n.rank_base,     n.join.local_ranks,
                    n.join.name,      n.join.hostname, n.socket->peer_address(),
                    n.join.addresses, n.join.gpus,     n.preflight};
  }

  void start_all() {
    MasterAddrInputs in;
    in.override_addr = options.master_addr;
    in.node0_peer = nodes[0]->socket->peer_address();
    for (const auto* n : nodes) {
      if (n->node_rank != 0) in.launcher_addresses_seen.push_back(n->socket->local_address());
      if (in.launcher_addresses_seen.size() >= 8) break;
    }
    Start start{choose_master_addr(in), nodes[0]->master_port};
    phase = Phase::Running;
    boost::system::error_code ignored;
    acceptor.close(ignored);  // the run has its nodes: later peers are turned away by the kernel
    accept_pause.cancel();
    join_timer.cancel();
    say_unsaid_refusals();
    std::vector<NodeInfo> infos;
    infos.reserve(nodes.size());
    for (auto* n : nodes) {
      n->state = State::Running;
      n->socket->send(start);
      infos.push_back(info(*n));
      n->preflight.clear();
    }
    handler.on_started(infos, start);
  }

  void on_running(Peer& p, Message&& m) {
    if (std::holds_alternative<Heartbeat>(m)) return;
    if (p.state == State::Done) return;  // lost or finished: nothing it sends counts any more
    if (std::holds_alternative<NodeDone>(m)) p.state = State::Done;
    switch (type_of(m)) {
      case MessageType::RankStarted:
      case MessageType::RankOutput:
      case MessageType::RankOutputClosed:
      case MessageType::RankFile:
      case MessageType::RankExited:
      case MessageType::NodeTeardown:
      case MessageType::NodeDone:
      case MessageType::Abort:
      case MessageType::Inspection:
        handler.on_node_message(p.node_rank, std::move(m));
        return;
      default:
        unexpected(m, "during the run");
    }
  }

  void on_join_timeout() {
    auto refused = refusals.describe();
    if (!refused.empty()) refused = "; " + refused;
    refusals.take_unsaid();  // the error says them all
    if (phase == Phase::Joining) {
      fail(fmt::format("the rendezvous timed out after {} (--join-timeout): {}{}", seconds_text(options.join_timeout),
                       describe_missing(joined_joins, options.nnodes, options.expected_names), refused),
           1);
    } else if (phase == Phase::Preparing) {
      std::vector<std::string> slow;
      for (const auto* n : nodes)
        if (n->state != State::Ready) slow.push_back(fmt::format("{} (node rank {})", n->join.name, n->node_rank));
      fail(fmt::format("the rendezvous timed out after {} (--join-timeout): every node joined but {} never got ready{}",
                       seconds_text(options.join_timeout), fmt::join(slow, ", "), refused),
           1);
    }
  }

  void close_all(const Message* last) {
    boost::system::error_code ignored;
    acceptor.close(ignored);
    accept_pause.cancel();
    say_unsaid_refusals();
    join_timer.cancel();
    heartbeat_timer.cancel();
    for (auto& [id, p] : peers) {
      p->liveness.cancel();
      if (last != nullptr && p->authenticated() && p->socket->is_open()) {
        p->socket->send(*last);
        p->socket->close_after_flush(kLinger);
      } else if (p->socket->is_open()) {
        p->socket->close();  // one still flushing its last frames is left to finish
      }
    }
  }

  void fail(const std::string& message, int exit_code) {
    if (phase == Phase::Stopped) return;
    phase = Phase::Stopped;
    Message abort = Abort{message, exit_code};
    close_all(&abort);
    handler.on_failed(message, exit_code);
  }
};

RendezvousServer::RendezvousServer(asio::io_context& io, const Endpoint& bind, Secret secret, ServerOptions options,
                                   ServerHandler& handler)
    : impl_(std::make_unique<Impl>(io, bind, std::move(secret), std::move(options), handler)) {}

RendezvousServer::~RendezvousServer() {
  if (impl_->phase != Impl::Phase::Stopped) impl_->close_all(nullptr);
}

int RendezvousServer::port() const { return impl_->bound_port; }

void RendezvousServer::start() { impl_->start(); }

void RendezvousServer::send(std::uint32_t node_rank, const Message& message) {
  if (node_rank < impl_->nodes.size() && impl_->nodes[node_rank] != nullptr)
    impl_->nodes[node_rank]->socket->send(message);
}

void RendezvousServer::broadcast(const Message& message) {
  for (auto* n : impl_->nodes)
    if (n != nullptr) n->socket->send(message);
}

void RendezvousServer::restart(const Restart& restart) {
  for (auto* n : impl_->nodes) {
    if (n == nullptr || n->state != Impl::State::Done || n->lost_said) continue;
    n->state = Impl::State::Running;
    n->socket->send(restart);
  }
}

void RendezvousServer::finish(const Finish& finish) {
  impl_->phase = Impl::Phase::Finishing;
  Message last = finish;
  impl_->close_all(&last);
}

void RendezvousServer::abort(const std::string& message, int exit_code) {
  if (impl_->phase == Impl::Phase::Stopped) return;
  impl_->phase = Impl::Phase::Stopped;
  Message last = Abort{message, exit_code};
  impl_->close_all(&last);
}

}  // namespace sgpu::rendezvous
