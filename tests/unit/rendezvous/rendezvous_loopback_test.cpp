// The rendezvous server and clients talking over real loopback sockets, on
// one event loop in this process.
#include <algorithm>
#include <functional>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/rendezvous/client.hpp"
#include "sgpu/rendezvous/server.hpp"

using namespace sgpu::rendezvous;
using namespace std::chrono_literals;

namespace {

struct Launcher : ServerHandler {
  std::vector<std::string> notices;
  std::vector<NodeInfo> nodes;
  Start start;
  std::vector<std::pair<std::uint32_t, Message>> messages;
  std::string failure;
  int failure_code = 0;
  std::vector<std::uint32_t> lost;
  RendezvousServer* server = nullptr;
  std::size_t done = 0;
  std::uint32_t restarts = 0;   // how many times to send Restart instead of Finish
  std::uint32_t next_port = 0;  // node 0's NodeDone said

  void on_notice(const std::string& text) override { notices.push_back(text); }
  void on_started(const std::vector<NodeInfo>& n, const Start& s) override {
    nodes = n;
    start = s;
  }
  void on_node_message(std::uint32_t node, Message&& m) override {
    const auto* node_done = std::get_if<NodeDone>(&m);
    if (node_done != nullptr && node == 0) next_port = node_done->next_master_port;
    bool is_done = node_done != nullptr;
    messages.emplace_back(node, std::move(m));
    if (!is_done || ++done < nodes.size()) return;
    done = 0;
    if (restarts == 0) {
      server->finish(Finish{0, "ok"});
      return;
    }
    --restarts;
    server->restart(Restart{1, start.master_addr, next_port});
  }
  void on_node_lost(std::uint32_t node, const std::string&) override {
    lost.push_back(node);
    if (on_lost) on_lost(node);
  }
  // --spares: a spare took a lost node's place, or could not.
  std::vector<NodeInfo> replaced;
  std::vector<std::string> replacement_failures;
  std::function<void(std::uint32_t)> on_lost;
  void on_node_replaced(const NodeInfo& node, const std::optional<Start>&) override {
    replaced.push_back(node);
    done = 0;
    server->restart(Restart{1, start.master_addr, next_port});
  }
  void on_replacement_failed(std::uint32_t node, const std::string& why) override {
    replacement_failures.push_back(fmt::format("{}: {}", node, why));
    server->finish(Finish{1, "no spare"});
  }
  void on_failed(const std::string& message, int code) override {
    failure = message;
    failure_code = code;
  }
};

struct Agent : ClientHandler {
  std::string name;
  int requested = -1;
  std::uint32_t ranks = 1;
  std::uint32_t nnodes = 0;
  Welcome welcome;
  Assign assign;
  std::optional<Start> start;
  std::optional<Finish> finish;
  std::vector<Restart> restarted;
  std::string lost;
  int lost_code = 0;
  bool vanish_on_start = false;  // its connection ends when its ranks would start: a lost node
  RendezvousClient* client = nullptr;

  Join on_welcome(const Welcome& w) override {
    welcome = w;
    Join j;
    j.name = name;
    j.hostname = name;
    j.local_ranks = ranks;
    j.node_rank = requested;
    j.nnodes = nnodes;
    return j;
  }
  std::optional<Ready> on_assign(const Assign& a) override {
    assign = a;
    return Ready{a.node_rank == 0 ? 29999U : 0U, ""};
  }
  void on_start(const Start& s) override {
    start = s;
    if (vanish_on_start) return client->close();
    client->send(RankExited{assign.rank_base, sgpu::env::ExitStatus::exited(0), false});
    client->send(NodeDone{assign.node_rank == 0 ? 30001U : 0U});
  }
  void on_message(Message&& m) override {
    if (auto* r = std::get_if<Restart>(&m)) {
      restarted.push_back(*r);
      client->send(RankExited{assign.rank_base, sgpu::env::ExitStatus::exited(0), false});
      client->send(NodeDone{});
      return;
    }
    if (auto* f = std::get_if<Finish>(&m)) {
      finish = *f;
      client->close();
    }
  }
  std::function<void()> on_gone;
  void on_lost(const std::string& why, int code) override {
    lost = why;
    lost_code = code;
    if (on_gone) on_gone();
  }
};

struct Fixture {
  boost::asio::io_context io;
  Secret secret = Secret::generate();
  Launcher launcher;
  std::unique_ptr<RendezvousServer> server;
  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<std::unique_ptr<RendezvousClient>> clients;

  void serve(ServerOptions options) {
    options.run_id = "run-1";
    if (options.job.empty()) options.job = "job-blob";
    server = std::make_unique<RendezvousServer>(io, Endpoint{"127.0.0.1", 0}, secret, options, launcher);
    launcher.server = server.get();
    server->start();
  }

  Agent& add(std::string name, int requested, std::uint32_t ranks, const Secret& s, std::uint32_t nnodes = 0,
             std::string source = "") {
    auto a = std::make_unique<Agent>();
    a->name = std::move(name);
    a->requested = requested;
    a->ranks = ranks;
    a->nnodes = nnodes;
    ClientOptions o;
    o.endpoint = Endpoint{"127.0.0.1", server->port()};
    o.join_timeout = 5s;
    o.source_address = std::move(source);
    auto c = std::make_unique<RendezvousClient>(io, o, s, *a);
    a->client = c.get();
    c->start();
    agents.push_back(std::move(a));
    clients.push_back(std::move(c));
    return *agents.back();
  }

  // The loop ends when every connection has closed and the server has
  // stopped listening; run_for's limit only guards a hang (a pending timer
  // of the test's own would keep the loop, and the test, waiting for it).
  void run() { io.run_for(20s); }
};

}  // namespace

TEST_CASE("rendezvous: three agents join, start together, report and finish") {
  Fixture f;
  ServerOptions o;
  o.nnodes = 3;
  o.heartbeat_timeout = 2s;
  f.serve(o);
  auto& c = f.add("c", -1, 4, f.secret);
  auto& a = f.add("a", 2, 1, f.secret, 3);  // asks for node rank 2
  auto& b = f.add("b", -1, 2, f.secret);
  f.run();

  CHECK(f.launcher.failure.empty());
  REQUIRE(f.launcher.nodes.size() == 3);
  // a asked for 2; b and c fill 0 and 1 by name.
  CHECK(b.assign.node_rank == 0);
  CHECK(c.assign.node_rank == 1);
  CHECK(a.assign.node_rank == 2);
  CHECK(b.assign.rank_base == 0);
  CHECK(c.assign.rank_base == 2);
  CHECK(a.assign.rank_base == 6);
  for (auto* agent : {&a, &b, &c}) {
    CHECK(agent->assign.world_size == 7);
    CHECK(agent->assign.nnodes == 3);
    CHECK(agent->welcome.run_id == "run-1");
    CHECK(agent->welcome.job == "job-blob");
    REQUIRE(agent->start);
    CHECK(agent->start->master_port == 29999);  // node 0's reservation
    CHECK(agent->start->master_addr == "127.0.0.1");
    REQUIRE(agent->finish);
    CHECK(agent->finish->summary == "ok");
    CHECK(agent->lost.empty());
  }
  CHECK(f.launcher.nodes[1].name == "c");
  CHECK(f.launcher.nodes[1].rank_base == 2);
  CHECK(f.launcher.nodes[1].local_ranks == 4);
  std::vector<std::uint32_t> exited;
  for (const auto& [node, m] : f.launcher.messages)
    if (const auto* e = std::get_if<RankExited>(&m)) exited.push_back(e->rank);
  std::sort(exited.begin(), exited.end());
  CHECK(exited == std::vector<std::uint32_t>{0, 2, 6});
}

TEST_CASE("rendezvous: agents leave from their own source addresses, for the rendezvous and the check") {
  Fixture f;
  ServerOptions o;
  o.nnodes = 3;
  o.heartbeat_timeout = 2s;
  f.serve(o);
  f.add("a", 0, 1, f.secret, 3, "127.0.0.2");
  f.add("b", 1, 1, f.secret, 3, "127.0.0.3");
  f.add("c", 2, 1, f.secret, 3, "127.0.0.4");
  f.run();

  CHECK(f.launcher.failure.empty());
  REQUIRE(f.launcher.nodes.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    CAPTURE(i);
    CHECK(f.launcher.nodes[i].peer_address == fmt::format("127.0.0.{}", i + 2));
    REQUIRE(f.agents[i]->finish);
  }
  // The others reached node 0's MASTER_PORT, by loopback.
  CHECK(f.launcher.nodes[1].socket_interface == "lo");
  CHECK(f.launcher.nodes[2].socket_interface == "lo");
}

TEST_CASE("rendezvous: a job description far larger than a hello frame reaches every agent") {
  // The Welcome carries the launcher's whole job (entrypoint, arguments,
  // environment, preflight): it follows the server's proof, so the agent
  // must take frames of kMaxPayload from then on, not only after it.
  Fixture f;
  ServerOptions o;
  o.nnodes = 2;
  o.heartbeat_timeout = 2s;
  o.job = std::string(64 * 1024, 'j');
  f.serve(o);
  auto& a = f.add("a", -1, 1, f.secret);
  auto& b = f.add("b", -1, 1, f.secret);
  f.run();
  CHECK(f.launcher.failure.empty());
  for (auto* agent : {&a, &b}) {
    CHECK(agent->lost.empty());
    CHECK(agent->welcome.job.size() == 64 * 1024);
    CHECK(agent->start);
  }
}

TEST_CASE("rendezvous: an agent with another secret is refused on both sides, the others go on") {
  Fixture f;
  ServerOptions o;
  o.nnodes = 1;
  o.heartbeat_timeout = 2s;
  f.serve(o);
  auto& intruder = f.add("intruder", -1, 1, Secret::generate());
  auto& good = f.add("good", -1, 1, f.secret);
  f.run();
  CHECK(intruder.lost.find("does not know this run's secret") != std::string::npos);
  CHECK(intruder.lost_code == 2);
  CHECK_FALSE(intruder.start);
  REQUIRE(good.finish);
  CHECK(f.launcher.nodes.size() == 1);
  CHECK(f.launcher.nodes[0].name == "good");
}

TEST_CASE("rendezvous: at the admission limit, later agents wait in the listen queue and join; none is reset") {
  Fixture f;
  ServerOptions o;
  o.nnodes = 2;
  o.heartbeat_timeout = 300ms;
  o.max_unauthenticated = 0;  // the limit is then the job's nodes and 64: 66
  f.serve(o);
  // 70 peers that never say hello fill the limit; the two agents come after.
  std::vector<boost::asio::ip::tcp::socket> silent;
  for (int i = 0; i < 70; ++i) {
    silent.emplace_back(f.io);
    silent.back().connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(f.server->port())});
  }
  auto& a = f.add("a", -1, 1, f.secret);
  auto& b = f.add("b", -1, 1, f.secret);
  f.run();
  CHECK(a.lost.empty());
  CHECK(b.lost.empty());
  CHECK(a.finish.has_value());
  CHECK(b.finish.has_value());
  auto said = [&](const std::string& text) {
    return std::count_if(f.launcher.notices.begin(), f.launcher.notices.end(),
                         [&](const std::string& n) { return n.find(text) != std::string::npos; });
  };
  CHECK(said("66 rendezvous connections are waiting to authenticate (the most at once)") == 1);
  CHECK(said("no authenticated hello within 300ms") >= 1);
}

TEST_CASE("rendezvous: two agents claiming one node rank fail the rendezvous everywhere") {
  Fixture f;
  ServerOptions o;
  o.nnodes = 2;
  f.serve(o);
  auto& a = f.add("a", 1, 1, f.secret);
  auto& b = f.add("b", 1, 1, f.secret);
  f.run();
  CHECK(f.launcher.failure.find("node rank 1 is claimed by both") != std::string::npos);
  CHECK(f.launcher.failure_code == 2);
  CHECK(a.lost == f.launcher.failure);
  CHECK(b.lost == f.launcher.failure);
  CHECK(a.lost_code == 2);
}

TEST_CASE("rendezvous: the join timeout names the missing node") {
  Fixture f;
  ServerOptions o;
  o.nnodes = 2;
  o.join_timeout = 300ms;
  o.expected_names = {"a", "b"};
  f.serve(o);
  auto& a = f.add("a", 0, 1, f.secret);
  f.run();
  CHECK(f.launcher.failure.find("timed out after 300ms (--join-timeout): 1 of 2 nodes joined (a as node rank 0); "
                                "missing: b (node rank 1)") != std::string::npos);
  CHECK(a.lost == f.launcher.failure);
}

TEST_CASE("rendezvous: an agent gives up when nothing listens") {
  boost::asio::io_context io;
  Agent a;
  ClientOptions o;
  o.endpoint = Endpoint{"127.0.0.1", 1};  // nothing listens on port 1
  o.join_timeout = 300ms;
  RendezvousClient c(io, o, Secret::generate(), a);
  a.client = &c;
  c.start();
  io.run_for(5s);
  CHECK(a.lost.find("cannot reach the rendezvous at 127.0.0.1:1 within 300ms (--join-timeout)") != std::string::npos);
}

TEST_CASE("rendezvous: Restart starts every node again, and their messages count again") {
  Fixture f;
  ServerOptions o;
  o.nnodes = 2;
  o.heartbeat_timeout = 2s;
  f.serve(o);
  f.launcher.restarts = 1;
  auto& a = f.add("a", 0, 1, f.secret);
  auto& b = f.add("b", 1, 1, f.secret);
  f.run();
  CHECK(f.launcher.failure.empty());
  for (auto* agent : {&a, &b}) {
    REQUIRE(agent->restarted.size() == 1);
    CHECK(agent->restarted[0] == Restart{1, f.launcher.start.master_addr, 30001});  // node 0's next port
    REQUIRE(agent->finish);
  }
  // Both attempts' reports reached the launcher: two RankExited per node.
  int exits = 0;
  for (const auto& [node, m] : f.launcher.messages) exits += std::holds_alternative<RankExited>(m) ? 1 : 0;
  CHECK(exits == 4);
  CHECK(f.launcher.lost.empty());
}

TEST_CASE("rendezvous: a spare takes a lost node's place, with its node rank and rank base, and Restart starts it") {
  for (std::uint32_t spare_ranks : {1U, 2U}) {
    CAPTURE(spare_ranks);
    Fixture f;
    ServerOptions o;
    o.nnodes = 2;
    o.heartbeat_timeout = 2s;
    o.readmit = true;
    f.serve(o);
    auto& a = f.add("a", 0, 1, f.secret);
    auto& b = f.add("b", 1, 1, f.secret);
    b.vanish_on_start = true;
    Agent* spare = nullptr;
    f.launcher.on_lost = [&](std::uint32_t node) {
      f.server->readmit(node, 1);
      spare = &f.add("c", static_cast<int>(node), spare_ranks, f.secret);
    };
    f.run();
    CHECK(f.launcher.failure.empty());
    CHECK(f.launcher.lost == std::vector<std::uint32_t>{1});
    REQUIRE(spare != nullptr);
    if (spare_ranks == 1) {
      CHECK(spare->assign == Assign{1, 2, 1, 2, true, 1});  // node 1's place, rank base and world, for attempt 1
      REQUIRE(f.launcher.replaced.size() == 1);
      CHECK(f.launcher.replaced[0].name == "c");
      CHECK(f.launcher.replaced[0].rank_base == 1);
      CHECK(!spare->start);  // not Start: the attempt's Restart, with the node that stayed
      REQUIRE(spare->restarted.size() == 1);
      REQUIRE(a.restarted.size() == 1);
      CHECK(spare->restarted[0] == a.restarted[0]);
      REQUIRE(spare->finish);
      REQUIRE(a.finish);
      std::vector<std::uint32_t> exited;
      for (const auto& [node, m] : f.launcher.messages)
        if (const auto* e = std::get_if<RankExited>(&m)) exited.push_back(node * 10 + e->rank);
      CHECK(exited == std::vector<std::uint32_t>{0, 0, 11});  // node 1's rank 1 reported by the spare
    } else {
      CHECK(f.launcher.replaced.empty());
      REQUIRE(f.launcher.replacement_failures.size() == 1);
      CHECK(f.launcher.replacement_failures[0] ==
            "1: c cannot take its place: it would run 2 ranks, and node 1's place needs 1");
      CHECK(spare->lost.find("node 1's place needs 1") != std::string::npos);
    }
  }
}

TEST_CASE("rendezvous: during the run, an agent nobody readmitted is turned away") {
  Fixture f;
  ServerOptions o;
  o.nnodes = 1;
  o.heartbeat_timeout = 2s;
  o.readmit = true;  // the listener stays open, but no place is
  f.serve(o);
  auto& a = f.add("a", 0, 1, f.secret);
  a.vanish_on_start = true;  // node 0 is lost, and nobody calls readmit
  Agent* late = nullptr;
  f.launcher.on_lost = [&](std::uint32_t) {
    late = &f.add("late", 0, 1, f.secret);
    late->on_gone = [&] { f.server->finish(Finish{1, "over"}); };
  };
  f.run();
  REQUIRE(late != nullptr);
  CHECK(late->lost.find("the rendezvous is already complete") != std::string::npos);
  CHECK(late->welcome.run_id.empty());  // refused before it learned anything of the run
}

TEST_CASE("rendezvous: an agent whose connection brings no hello connects again, within its join timeout") {
  // The first connection is taken by a listener that says nothing (a launcher
  // whose listen queue was full completes such a connection only after the
  // kernel's SYN-ACK retries, or never); the rendezvous then listens on the
  // same port, and the agent, after its hello timeout, connects again and joins.
  Fixture f;
  boost::asio::ip::tcp::acceptor silent(f.io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  auto port = silent.local_endpoint().port();
  boost::asio::ip::tcp::socket held(f.io);
  ServerOptions o;
  o.nnodes = 1;
  o.heartbeat_timeout = 2s;
  o.run_id = "run-1";
  o.job = "job-blob";
  silent.async_accept(held, [&](boost::system::error_code ec) {
    REQUIRE(!ec);
    silent.close();
    f.server = std::make_unique<RendezvousServer>(f.io, Endpoint{"127.0.0.1", port}, f.secret, o, f.launcher);
    f.launcher.server = f.server.get();
    f.server->start();
  });
  Agent agent;
  agent.name = "a";
  ClientOptions co;
  co.endpoint = Endpoint{"127.0.0.1", port};
  co.join_timeout = 5s;
  co.hello_timeout = 300ms;
  RendezvousClient client(f.io, co, f.secret, agent);
  agent.client = &client;
  client.start();
  f.io.run_for(10s);
  CHECK(agent.lost.empty());
  REQUIRE(agent.finish);
  CHECK(agent.finish->summary == "ok");
  CHECK(f.launcher.failure.empty());
}
