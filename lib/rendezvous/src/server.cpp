#include "sgpu/rendezvous/server.hpp"

#include <unistd.h>
#include <algorithm>

#include "listener.hpp"
#include "server_impl.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/rendezvous/assignment.hpp"
#include "sgpu/rendezvous/host_info.hpp"

namespace sgpu::rendezvous {

namespace {
constexpr auto kLinger = std::chrono::seconds(2);
}  // namespace

void RendezvousServer::Impl::start() {
  queue_limit = listen_queue_limit();
  if (options.nnodes > queue_limit) overflows_at_start = listen_overflows();
  accept();
  join_timer.expires_after(options.join_timeout);
  join_timer.async_wait([this, g = guard()](boost::system::error_code ec) {
    if (ec || g.expired()) return;
    on_join_timeout();
  });
  arm_heartbeat();
}

void RendezvousServer::Impl::forget_join(Peer& p) {
  auto it = std::find(joined.begin(), joined.end(), &p);
  if (it == joined.end()) return;
  joined.erase(it);
  auto r = p.join.node_rank;
  if (r >= 0 && static_cast<std::size_t>(r) < claimed.size() && claimed[static_cast<std::size_t>(r)] == &p)
    claimed[static_cast<std::size_t>(r)] = nullptr;
}

void RendezvousServer::Impl::drop(Peer& p, const std::string& notice) {
  handler.on_notice(notice);
  erase(p);
}

// A joined node's connection is gone.
void RendezvousServer::Impl::lost(Peer& p, const std::string& why) {
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
      if (p.replacement) return replacement_failed(p, why);
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

void RendezvousServer::Impl::on_closed(std::uint64_t id, const std::string& why) {
  auto it = peers.find(id);
  if (it == peers.end()) return;
  lost(*it->second, why);
}

void RendezvousServer::Impl::on_frame(std::uint64_t id, std::uint8_t raw_type, std::string_view payload) {
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
      if (p.replacement) return on_replacement_preparing(p, std::move(message));
      return on_preparing(p, std::move(message));
    case State::Running:
    case State::Done:
      return on_running(p, std::move(message));
  }
}

void RendezvousServer::Impl::on_join(Peer& p, Message&& m) {
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
  if (phase == Phase::Running) return on_rejoin(p, std::move(*join));
  claimed.resize(options.nnodes, nullptr);
  const Join* holder = nullptr;
  if (join->node_rank >= 0 && static_cast<std::uint32_t>(join->node_rank) < options.nnodes)
    if (const auto* h = claimed[static_cast<std::size_t>(join->node_rank)]) holder = &h->join;
  auto check = check_join(joined.size(), holder, *join, options.nnodes);
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
  if (p.join.node_rank >= 0) claimed[static_cast<std::size_t>(p.join.node_rank)] = &p;
  handler.on_joined(joined.size(), options.nnodes);
  if (joined.size() == options.nnodes) assign();
}

// Nodes arriving faster than the launcher takes them fill the listen queue,
// and the kernel drops the rest without a word: each waits a second or more
// for its SYN to be sent again. Said in one line, with the limit and its value.
std::optional<std::string> RendezvousServer::Impl::dropped_joins() const {
  if (!overflows_at_start) return std::nullopt;
  auto now = listen_overflows();
  if (!now || *now <= *overflows_at_start) return std::nullopt;
  return fmt::format(
      "{} connections were dropped on this machine for a full listen queue while the {} nodes joined "
      "(net.core.somaxconn = {}; TcpExt ListenOverflows counts every program's): each of those nodes waited a "
      "second or more to try again; sysctl -w net.core.somaxconn={} lets a queue hold them all",
      *now - *overflows_at_start, options.nnodes, queue_limit, options.nnodes);
}

void RendezvousServer::Impl::say_dropped_joins() {
  if (auto text = dropped_joins()) handler.on_notice(*text);
}

void RendezvousServer::Impl::assign() {
  say_dropped_joins();
  auto ranks = assign_node_ranks(joins(), options.nnodes);
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
  world = bases.back() + local.back();
  phase = Phase::Preparing;
  for (auto* n : nodes) {
    n->state = State::Assigned;
    n->rank_base = bases[n->node_rank];
    n->socket->send(Assign{n->node_rank, options.nnodes, n->rank_base, world});
  }
  joined.clear();
  claimed.clear();
}

void RendezvousServer::Impl::on_preparing(Peer& p, Message&& m) {
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
  if (const auto* probed_result = std::get_if<ProbeResult>(&m)) {
    if (phase != Phase::Probing || p.state != State::Ready || p.probe) unexpected(m, "outside the reachability check");
    on_probe_result(p, *probed_result);
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
  if (ready == options.nnodes) begin_probe();
}

Start RendezvousServer::Impl::start_message() const {
  MasterAddrInputs in;
  in.override_addr = options.master_addr;
  in.node0_peer = nodes[0]->socket->peer_address();
  for (const auto* n : nodes) {
    if (n->node_rank != 0) in.launcher_addresses_seen.push_back(n->socket->local_address());
    if (in.launcher_addresses_seen.size() >= 8) break;
  }
  return Start{choose_master_addr(in), nodes[0]->master_port};
}

// Every node ready: before any rank starts, node 0 listens on MASTER_PORT
// and every other node connects to MASTER_ADDR:MASTER_PORT. A firewall, a
// wrong address or a route that leads nowhere is named now, not after
// init_process_group hung until its timeout.
void RendezvousServer::Impl::begin_probe() {
  start_msg = start_message();
  if (nodes.size() < 2) return checked();
  phase = Phase::Probing;
  nodes[0]->socket->send(probe(true));
}

Probe RendezvousServer::Impl::probe(bool listen) const {
  return Probe{start_msg->master_addr, start_msg->master_port, listen,
               static_cast<std::uint32_t>(options.reach_timeout.count())};
}

void RendezvousServer::Impl::on_probe_result(Peer& p, const ProbeResult& r) {
  p.probe = r;
  auto target = fmt::format("{}:{}", start_msg->master_addr, start_msg->master_port);
  if (p.node_rank == 0) {
    if (!r.ok) {
      fail(fmt::format("node 0 ({}) cannot listen on MASTER_PORT {} for the other nodes: {}", p.join.name,
                       start_msg->master_port, r.error),
           1);
      return;
    }
    for (auto* n : nodes)
      if (n != &p) n->socket->send(probe(false));
    return;
  }
  if (++probed < nodes.size() - 1) return;
  std::vector<std::string> unreachable;
  for (const auto* n : nodes) {
    if (n->node_rank == 0 || n->probe->ok) continue;
    const auto& answer = *n->probe;
    auto via = answer.interface.empty() ? "" : " from " + answer.interface;
    unreachable.push_back(fmt::format("node {} ({}) cannot reach {}{}: {}{}", n->node_rank, n->join.name, target, via,
                                      answer.error, answer.interface.empty() ? " (it has no route there)" : ""));
  }
  if (!unreachable.empty()) {
    fail(fmt::format("{}; no rank was started", fmt::join(unreachable, "; ")), 1);
    return;
  }
  checked();
}

// The network is checked: the handler may end here (--explain-network).
void RendezvousServer::Impl::checked() {
  auto infos = node_infos();  // with their preflight reports; one copy for both handler calls
  if (auto done = handler.on_network_checked(infos, *start_msg)) {
    phase = Phase::Stopped;
    Message word = *done;
    close_all(&word);
    handler.on_failed(done->summary, done->exit_code);
    return;
  }
  start_all(infos);
}

NodeInfo RendezvousServer::Impl::info(const Peer& n) const {
  return NodeInfo{n.node_rank,
                  n.rank_base,
                  n.join.local_ranks,
                  n.join.name,
                  n.join.hostname,
                  n.socket->peer_address(),
                  n.join.addresses,
                  n.join.gpus,
                  n.preflight,
                  n.probe ? n.probe->interface : "",
                  n.probe ? n.probe->elapsed_us : 0,
                  n.join.interfaces,
                  n.join.rdma,
                  n.join.hostname_address};
}

std::vector<NodeInfo> RendezvousServer::Impl::node_infos() const {
  std::vector<NodeInfo> infos;
  infos.reserve(nodes.size());
  for (const auto* n : nodes) infos.push_back(info(*n));
  return infos;
}

std::vector<Join> RendezvousServer::Impl::joins() const {
  std::vector<Join> out;
  out.reserve(joined.size());
  for (const auto* p : joined) out.push_back(p->join);
  return out;
}

void RendezvousServer::Impl::start_all(const std::vector<NodeInfo>& infos) {
  phase = Phase::Running;
  boost::system::error_code ignored;
  if (!options.readmit) {
    acceptor.close(ignored);  // the run has its nodes: later peers are turned away by the kernel
    accept_pause.cancel();
  }
  join_timer.cancel();
  say_unsaid_refusals();
  for (auto* n : nodes) {
    n->state = State::Running;
    n->socket->send(*start_msg);
    n->preflight.clear();
  }
  handler.on_started(infos, *start_msg);
}

// --spares: an agent started on a spare host, asking for a lost node's rank
// (readmit), takes its place with its rank base; anyone else is turned away.
void RendezvousServer::Impl::on_rejoin(Peer& p, Join&& join) {
  auto slot = join.node_rank < 0 ? readmitting.end() : readmitting.find(static_cast<std::uint32_t>(join.node_rank));
  if (slot == readmitting.end()) {
    handler.on_notice(fmt::format("refused node {} ({}): the run has all its nodes and none is to be replaced",
                                  join.name, p.socket->peer()));
    refuse_quietly(p, "the run has all its nodes and none is to be replaced");
    return;
  }
  auto node_rank = slot->first;
  auto attempt = slot->second;
  auto* old = nodes[node_rank];
  if (join.local_ranks != old->join.local_ranks) {
    auto why = fmt::format("it would run {} rank{}, and node {}'s place needs {}", join.local_ranks,
                           join.local_ranks == 1 ? "" : "s", node_rank, old->join.local_ranks);
    refuse_quietly(p, why);
    readmitting.erase(slot);
    handler.on_replacement_failed(node_rank, fmt::format("{} cannot take its place: {}", join.name, why));
    return;
  }
  readmitting.erase(slot);
  p.join = std::move(join);
  p.node_rank = node_rank;
  p.rank_base = old->rank_base;
  p.state = State::Assigned;
  p.replacement = true;
  nodes[node_rank] = &p;
  erase(*old);  // the lost agent's connection, if it was still open, ends here
  p.socket->send(Assign{node_rank, options.nnodes, p.rank_base, world, true, attempt});
}

void RendezvousServer::Impl::on_replacement_preparing(Peer& p, Message&& m) {
  if (std::holds_alternative<Heartbeat>(m)) return;
  if (const auto* abort = std::get_if<Abort>(&m)) return replacement_failed(p, abort->message);
  auto* r = std::get_if<Ready>(&m);
  if (r == nullptr || p.state != State::Assigned) unexpected(m, "while taking a lost node's place");
  p.master_port = r->master_port;
  p.state = State::Ready;
  std::optional<Start> start;
  if (p.node_rank == 0) {
    if (r->master_port == 0 || r->master_port > 65535)
      throw ProtocolError(fmt::format("node 0 reported MASTER_PORT {}", r->master_port));
    start = start_message();
    start_msg = start;
  }
  handler.on_node_replaced(info(p), start);
}

void RendezvousServer::Impl::replacement_failed(Peer& p, const std::string& why) {
  p.liveness.cancel();
  p.socket->close();
  p.state = State::Done;
  p.lost_said = true;
  handler.on_replacement_failed(p.node_rank, why);
}

void RendezvousServer::Impl::on_running(Peer& p, Message&& m) {
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
    case MessageType::NodeSamples:
    case MessageType::NodeExcluded:
      handler.on_node_message(p.node_rank, std::move(m));
      return;
    default:
      unexpected(m, "during the run");
  }
}

void RendezvousServer::Impl::on_join_timeout() {
  auto refused = refusals.describe();
  if (!refused.empty()) refused = "; " + refused;
  refusals.take_unsaid();  // the error says them all
  if (phase == Phase::Joining) {
    // The nodes that never came may be those whose connections the kernel dropped.
    auto dropped = dropped_joins();
    fail(fmt::format("the rendezvous timed out after {} (--join-timeout): {}{}{}", seconds_text(options.join_timeout),
                     describe_missing(joins(), options.nnodes, options.expected_names), refused,
                     dropped ? "; " + *dropped : std::string()),
         1);
  } else if (phase == Phase::Probing) {
    fail(fmt::format("the rendezvous timed out after {} (--join-timeout): every node got ready but the check that "
                     "each reaches MASTER_ADDR did not end{}",
                     seconds_text(options.join_timeout), refused),
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

void RendezvousServer::Impl::close_all(const Message* last) {
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

void RendezvousServer::Impl::fail(const std::string& message, int exit_code) {
  if (phase == Phase::Stopped) return;
  phase = Phase::Stopped;
  Message abort = Abort{message, exit_code};
  close_all(&abort);
  handler.on_failed(message, exit_code);
}

RendezvousServer::RendezvousServer(asio::io_context& io, const Endpoint& bind, Secret secret, ServerOptions options,
                                   ServerHandler& handler)
    : impl_(std::make_unique<Impl>(io, bind, std::move(secret), std::move(options), handler)) {}

RendezvousServer::~RendezvousServer() {
  if (impl_->phase != Impl::Phase::Stopped) impl_->close_all(nullptr);
}

int RendezvousServer::port() const { return impl_->bound_port; }

void RendezvousServer::start() { impl_->start(); }

// A spare readmitted during the run hears nothing of the attempt before its
// own start (a signal, a question): it has no ranks yet, and its protocol
// state takes only Restart.
bool RendezvousServer::Impl::hears_run(const Peer* n) {
  return n != nullptr && !(n->replacement && n->state < State::Running);
}

void RendezvousServer::send(std::uint32_t node_rank, const Message& message) {
  if (node_rank < impl_->nodes.size() && Impl::hears_run(impl_->nodes[node_rank]))
    impl_->nodes[node_rank]->socket->send(message);
}

void RendezvousServer::broadcast(const Message& message) {
  for (auto* n : impl_->nodes)
    if (Impl::hears_run(n)) n->socket->send(message);
}

void RendezvousServer::restart(const Restart& restart) {
  for (std::uint32_t k = 0; k < impl_->nodes.size(); ++k) {
    auto* n = impl_->nodes[k];
    if (n == nullptr || n->lost_said) continue;
    if (n->state == Impl::State::Done) {
      n->state = Impl::State::Running;
      n->socket->send(restart);
    } else {
      start_spare(k, restart);  // readmitted and ready: its first start
    }
  }
}

void RendezvousServer::start_spare(std::uint32_t node_rank, const Restart& attempt) {
  auto& s = *impl_;
  if (node_rank >= s.nodes.size()) return;
  auto* n = s.nodes[node_rank];
  if (n == nullptr || !n->replacement || n->state != Impl::State::Ready || n->lost_said) return;
  n->state = Impl::State::Running;
  n->socket->send(attempt);
}

void RendezvousServer::readmit(std::uint32_t node_rank, std::uint32_t attempt) {
  auto& s = *impl_;
  if (!s.options.readmit || node_rank >= s.nodes.size() || s.phase != Impl::Phase::Running) return;
  s.readmitting[node_rank] = attempt;
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
