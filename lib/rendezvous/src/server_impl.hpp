#pragma once
// The rendezvous server's state (internal to lib/rendezvous), shared by its
// two halves: server_admission.cpp lets peers in (accepting, the hello and
// the secret's proof, refusals, every connection's liveness and the
// heartbeats); server.cpp runs the job's nodes (join, node ranks, readiness,
// the start, the run's messages, a lost node, the end).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/rendezvous/framed_socket.hpp"
#include "sgpu/rendezvous/refusals.hpp"
#include "sgpu/rendezvous/server.hpp"

namespace sgpu::rendezvous {
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

inline std::string seconds_text(std::chrono::milliseconds d) {
  return env::format_duration(std::chrono::duration_cast<env::Seconds>(d));
}

struct RendezvousServer::Impl {
  enum class Phase { Joining, Preparing, Probing, Running, Finishing, Stopped };
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
    std::string preflight;             // Ready's report
    std::optional<ProbeResult> probe;  // its answer to the reachability check
    bool lost_said = false;            // on_node_lost was called for it
    bool replacement = false;          // readmitted in a lost node's place, during the run
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
  bool accept_paused_said = false;  // once per stretch of failed accepts
  bool accept_held = false;         // admission_limit() peers wait to authenticate: no accept until one less
  bool accept_held_said = false;    // once per run
  // More nodes than one listen queue holds: this machine's count of
  // connections dropped for a full queue when the rendezvous began (said
  // once every node joined, if it grew).
  std::optional<std::uint64_t> overflows_at_start;
  std::uint32_t queue_limit = 0;
  RefusalLog refusals;                                    // peers refused before they authenticated
  std::shared_ptr<int> token = std::make_shared<int>(0);  // handlers check it is still alive
  std::unordered_map<std::uint64_t, std::unique_ptr<Peer>> peers;
  std::vector<Peer*> joined;   // arrival order, until assignment
  std::vector<Peer*> claimed;  // by requested node rank (--node-rank), until assignment
  std::vector<Peer*> nodes;    // by node rank, after assignment
  std::uint64_t next_id = 1;
  std::size_t unauthenticated = 0;
  std::size_t ready = 0;
  std::size_t probed = 0;          // nodes other than 0 that answered their Probe
  std::optional<Start> start_msg;  // MASTER_ADDR and MASTER_PORT, once every node is ready
  std::uint32_t world = 0;         // every node's ranks, once assigned
  std::unordered_map<std::uint32_t, std::uint32_t> readmitting;  // a lost node's rank -> the attempt its spare joins
  int bound_port = 0;
  Phase phase = Phase::Joining;

  Impl(asio::io_context& io_, const Endpoint& bind, Secret s, ServerOptions o, ServerHandler& h);

  std::weak_ptr<int> guard() const { return token; }

  // --- admission (server_admission.cpp) ---
  void accept();
  void pause_accepting(const boost::system::error_code& ec);
  std::size_t admission_limit() const;
  void hold_accepting();
  void left_unauthenticated();
  void notice(const Peer& p, const std::string& reason, const std::string& text);
  void say_unsaid_refusals();
  void on_accept(tcp::socket socket);
  SteadyClock::time_point deadline(const Peer& p) const;
  void arm_liveness(Peer& p);
  void arm_heartbeat();
  void erase(Peer& p);
  void refuse(Peer& p, const std::string& why, const std::string& reason);
  void refuse_quietly(Peer& p, const std::string& reason);
  [[noreturn]] static void unexpected(const Message& m, const char* when);
  void on_hello(Peer& p, const Message& m);
  void on_auth(Peer& p, const Message& m);

  // --- the job's nodes (server.cpp) ---
  void start();
  void forget_join(Peer& p);
  void drop(Peer& p, const std::string& notice);
  void lost(Peer& p, const std::string& why);
  void on_closed(std::uint64_t id, const std::string& why);
  void on_frame(std::uint64_t id, std::uint8_t raw_type, std::string_view payload);
  void on_join(Peer& p, Message&& m);
  void on_rejoin(Peer& p, Join&& join);  // readmit: during the run, a spare in a lost node's place
  void on_replacement_preparing(Peer& p, Message&& m);
  void replacement_failed(Peer& p, const std::string& why);
  static bool hears_run(const Peer* n);  // not a spare still joining: it takes only its Restart
  void assign();
  std::optional<std::string> dropped_joins() const;  // said once all joined, or in the join timeout's error
  void say_dropped_joins();
  void on_preparing(Peer& p, Message&& m);
  NodeInfo info(const Peer& n) const;
  std::vector<NodeInfo> node_infos() const;  // by node rank
  std::vector<Join> joins() const;           // of `joined`, in arrival order (assignment, the timeout's message)
  Start start_message() const;
  void begin_probe();
  Probe probe(bool listen) const;  // the check's ask: node 0 listens, the others connect
  void on_probe_result(Peer& p, const ProbeResult& r);
  void checked();
  void start_all(const std::vector<NodeInfo>& infos);  // `infos`: node_infos() before the preflight is cleared
  void on_running(Peer& p, Message&& m);
  void on_join_timeout();
  void close_all(const Message* last);
  void fail(const std::string& message, int exit_code);
};

}  // namespace sgpu::rendezvous
