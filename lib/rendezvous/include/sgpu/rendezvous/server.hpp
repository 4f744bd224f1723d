#pragma once
// The launcher's side of the rendezvous: a TCP server on the launcher's Asio
// loop. It authenticates each agent, collects `nnodes` joins, assigns node
// ranks and global rank bases, waits until every node is ready (node 0 has
// reserved MASTER_PORT), then starts them all at once. During the run it
// hands each node's messages to the ServerHandler and watches heartbeats.
//
// A peer that does not prove the secret, speaks another protocol version,
// sends a malformed or oversized frame, or does not finish its hello within
// the heartbeat timeout is refused and logged; nothing it sent is acted on,
// and no other connection is affected.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/gpu.hpp"
#include "sgpu/rendezvous/auth.hpp"
#include "sgpu/rendezvous/endpoint.hpp"
#include "sgpu/rendezvous/protocol.hpp"

namespace sgpu::rendezvous {

struct ServerOptions {
  std::uint32_t nnodes = 1;
  std::vector<std::string> expected_names;  // by node rank, for messages; may be empty
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(10)};
  std::string run_id;
  std::string job;          // sent to every agent in Welcome
  std::string master_addr;  // --master-addr; "" chooses
  std::size_t max_unauthenticated = 8192;
  // Several nodes: before Start, every node connects to MASTER_ADDR:MASTER_PORT
  // while node 0 listens there (Probe), each within this long.
  std::chrono::milliseconds reach_timeout{std::chrono::seconds(5)};
  // --spares: the listener stays open during the run, so an agent started
  // on a spare host can take a lost node's place (readmit).
  bool readmit = false;
};

// A node as the launcher knows it once the rendezvous is done.
struct NodeInfo {
  std::uint32_t node_rank = 0;
  std::uint32_t rank_base = 0;
  std::uint32_t local_ranks = 0;
  std::string name;
  std::string hostname;
  std::string peer_address;  // as the launcher saw its connection
  std::vector<std::string> addresses;
  std::vector<env::Gpu> gpus;
  std::string preflight;  // its Ready's preflight report; "" without one
  // The reachability check: the interface the node routes MASTER_ADDR
  // through ("" unknown, or one node) and how long its connect took.
  std::string socket_interface;
  std::uint32_t reach_us = 0;
  // Its network as its agent reported it at Join.
  std::vector<NetInterface> interfaces;
  std::vector<RdmaDevice> rdma;
  std::string hostname_address;
};

class ServerHandler {
 public:
  virtual ~ServerHandler() = default;
  // Refused peers, nodes that left before the rendezvous completed.
  virtual void on_notice(const std::string& text) = 0;
  virtual void on_joined(std::size_t /*joined*/, std::uint32_t /*nnodes*/) {}
  // Node `node` said Ready, the `ready`-th of `nnodes` (its preflight report
  // in node.preflight). An Abort or a Finish returned ends the rendezvous
  // with it, on every node, before any starts (then on_failed is called
  // with its message or summary and code).
  virtual std::optional<Message> on_node_ready(const NodeInfo& /*node*/, std::size_t /*ready*/,
                                               std::uint32_t /*nnodes*/) {
    return std::nullopt;
  }
  // Every node is ready and reaches MASTER_ADDR:MASTER_PORT (the
  // reachability check passed; one node: nothing to check), before Start is
  // sent. A Finish returned ends the rendezvous with it on every node, no
  // rank started (--explain-network; then on_failed with its summary).
  virtual std::optional<Finish> on_network_checked(const std::vector<NodeInfo>& /*nodes*/, const Start& /*start*/) {
    return std::nullopt;
  }
  // Every node joined and is ready; Start has been sent to all.
  virtual void on_started(const std::vector<NodeInfo>& nodes, const Start& start) = 0;
  // A run-time message from an agent (RankOutput, RankExited, NodeDone, Abort, ...).
  virtual void on_node_message(std::uint32_t node_rank, Message&& message) = 0;
  // A started node's connection dropped or went silent (also one that said
  // NodeDone, until the run is finished: it cannot take part in a restart).
  virtual void on_node_lost(std::uint32_t node_rank, const std::string& why) = 0;
  // readmit: the agent that took node `node.node_rank`'s place is ready (not
  // started: restart starts it with the others). `start`: the new MASTER_ADDR
  // and MASTER_PORT when it is node 0.
  virtual void on_node_replaced(const NodeInfo& /*node*/, const std::optional<Start>& /*start*/) {}
  // readmit: the agent taking that place refused its assignment, failed or
  // left before it was ready.
  virtual void on_replacement_failed(std::uint32_t /*node_rank*/, const std::string& /*why*/) {}
  // The rendezvous cannot complete (timeout, conflicting requests, an agent
  // that cannot run); every agent has been sent Abort. Also after a Finish
  // that on_node_ready or on_network_checked returned.
  virtual void on_failed(const std::string& message, int exit_code) = 0;
};

class RendezvousServer {
 public:
  // Binds and listens at once (so the port is known); `bind.host` "" means
  // every interface, `bind.port` 0 a free port. Throws sgpu::Error.
  RendezvousServer(boost::asio::io_context& io, const Endpoint& bind, Secret secret, ServerOptions options,
                   ServerHandler& handler);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const;
  void start();

  void send(std::uint32_t node_rank, const Message& message);
  void broadcast(const Message& message);
  // Another attempt (after every node said NodeDone): Restart to every node,
  // whose messages count again from now on.
  void restart(const Restart& restart);
  // --spares (ServerOptions::readmit): the next agent that joins asking for
  // node rank `node_rank` (a lost node's) takes its place, with the same
  // rank base and number of ranks, for attempt `attempt`; its old
  // connection, if any, is closed then. Others asking are refused.
  void readmit(std::uint32_t node_rank, std::uint32_t attempt);
  // Starts the ranks of the spare that took node `node_rank`'s place and is
  // ready, alone: it joins the attempt the other nodes are running (restart
  // starts it with every node).
  void start_spare(std::uint32_t node_rank, const Restart& attempt);
  // Sends Finish to every connected node and lets each connection close once
  // it is written; stops accepting and heartbeating.
  void finish(const Finish& finish);
  // Ends the rendezvous from the launcher's side: Abort to every agent.
  void abort(const std::string& message, int exit_code);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgpu::rendezvous
