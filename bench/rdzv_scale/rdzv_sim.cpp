// sgpu_rdzv_sim HOST:PORT N FIRST_NODE_RANK: N simulated agents, on one
// event loop per process (one process while their descriptors fit its
// limit, more beyond), join a real launcher's rendezvous (secret in
// SGPU_RDZV_SECRET) as node ranks FIRST_NODE_RANK.., each with one rank that
// exits 0 at once.
// Prints JSON: seconds from the first connect until every agent was started
// (the rendezvous is complete) and until every agent was told to finish.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/rendezvous/client.hpp"

using namespace sgpu::rendezvous;
using Clock = std::chrono::steady_clock;

namespace {

struct Stats {
  Clock::time_point t0 = Clock::now();
  Clock::time_point last_start;
  Clock::time_point last_finish;
  int started = 0;
  int finished = 0;
  int failed = 0;
  std::string first_failure;
};

struct SimAgent : ClientHandler {
  int node_rank = 0;
  Stats* stats = nullptr;
  RendezvousClient* client = nullptr;
  std::uint32_t rank = 0;

  Join on_welcome(const Welcome&) override {
    Join j;
    j.name = fmt::format("sim-{:05d}", node_rank);
    j.hostname = j.name;
    j.addresses = {"127.0.0.1"};
    // A GPU node's usual network report (protocol 6): loopback, the cluster
    // network, IPoIB and its RDMA device, the hostname's address.
    j.interfaces = {{"lo", {"127.0.0.1", "::1"}, true, 65536, "loopback"},
                    {"eth0", {"127.0.0.1", "fd00::1:2"}, true, 9000, "ether"},
                    {"ib0", {"10.128.0.2"}, true, 2044, "infiniband"}};
    j.rdma = {{"mlx5_0", "InfiniBand", "ACTIVE"}};
    j.hostname_address = "127.0.1.1";
    j.local_ranks = 1;
    j.node_rank = node_rank;
    return j;
  }
  std::optional<Ready> on_assign(const Assign& a) override {
    rank = a.rank_base;
    return Ready{};
  }
  void on_start(const Start&) override {
    ++stats->started;
    stats->last_start = Clock::now();
    client->send(RankStarted{rank, 1});
    client->send(RankOutputClosed{rank, OutputStream::Out});
    client->send(RankOutputClosed{rank, OutputStream::Err});
    client->send(RankExited{rank, sgpu::env::ExitStatus::exited(0), false});
    client->send(NodeDone{});
  }
  void on_message(Message&& m) override {
    if (std::holds_alternative<Finish>(m)) {
      ++stats->finished;
      stats->last_finish = Clock::now();
      client->close();
    }
  }
  void on_lost(const std::string& why, int) override {
    if (stats->failed++ == 0) stats->first_failure = why;
  }
};

// What one process of agents reports to the parent: counts, and its last
// start and finish as steady-clock nanoseconds (one clock for all processes).
struct Report {
  int started = 0, finished = 0, failed = 0;
  std::int64_t last_start_ns = 0, last_finish_ns = 0;
  char first_failure[256] = {};
};

std::int64_t ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// One process: `count` agents from node rank `first` on one event loop. Says
// a byte on `ready` once they are built; they connect once `go` reads end of
// file (the parent's clock has started).
Report run_agents(const Endpoint& endpoint, const Secret& secret, int first, int count, int ready, int go) {
  boost::asio::io_context io(1);
  Stats stats;
  std::vector<std::unique_ptr<SimAgent>> agents;
  std::vector<std::unique_ptr<RendezvousClient>> clients;
  for (int i = 0; i < count; ++i) {
    auto a = std::make_unique<SimAgent>();
    a->node_rank = first + i;
    a->stats = &stats;
    ClientOptions o;
    o.endpoint = endpoint;
    o.join_timeout = std::chrono::seconds(60);
    // A connection the kernel dropped for a full listen queue completes only
    // when the launcher's SYN-ACK is sent again (1, 2, 4, 8 s): the hello
    // may take that long, and an agent that gave up would never join.
    o.hello_timeout = std::chrono::seconds(60);
    // Each agent from its own loopback address, as each real agent is on a
    // host of its own: from one address, the kernel's search for a free
    // ephemeral port grew with every connection held (a sixth of the
    // simulator's CPU at 16384 agents, 28232 ports for 32768 connections).
    o.source_address = fmt::format("127.1.{}.{}", (a->node_rank / 250) % 250, a->node_rank % 250 + 1);
    clients.push_back(std::make_unique<RendezvousClient>(io, o, secret, *a));
    a->client = clients.back().get();
    agents.push_back(std::move(a));
  }
  char byte = 1;
  if (::write(ready, &byte, 1) != 1) ::_exit(1);
  ::close(ready);
  while (::read(go, &byte, 1) < 0 && errno == EINTR) {
  }
  for (auto& c : clients) c->start();
  io.run();
  Report r{stats.started, stats.finished, stats.failed, ns(stats.last_start), ns(stats.last_finish), {}};
  std::snprintf(r.first_failure, sizeof r.first_failure, "%s", stats.first_failure.c_str());
  return r;
}

}  // namespace

// Every agent holds its rendezvous connection and, during the reachability
// check, a second one. One process holds as many as its descriptor limit
// lets it (raised to the hard limit); more agents are split over more
// processes, as they would be over more machines.
int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: sgpu_rdzv_sim HOST:PORT AGENTS FIRST_NODE_RANK (secret in SGPU_RDZV_SECRET)\n");
    return 2;
  }
  try {
    auto endpoint = parse_endpoint(argv[1], "HOST:PORT");
    int n = std::atoi(argv[2]);
    int first = std::atoi(argv[3]);
    auto secret = find_secret(sgpu::env::current_environment(), "", "--rdzv-secret-file");
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
    auto per_process = lim.rlim_max == RLIM_INFINITY ? static_cast<rlim_t>(n) : (lim.rlim_max - 64) / 2;
    int processes = static_cast<int>((static_cast<rlim_t>(n) + per_process - 1) / per_process);
    int chunk = (n + processes - 1) / processes;
    int go[2];
    int ready[2];
    if (::pipe(go) != 0 || ::pipe(ready) != 0) throw std::runtime_error("pipe failed");
    std::vector<std::pair<pid_t, int>> children;  // pid, the read end of its report
    for (int p = 0; p < processes; ++p) {
      int out[2];
      if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
      pid_t pid = ::fork();
      if (pid == 0) {
        ::close(go[1]);
        ::close(ready[0]);
        ::close(out[0]);
        int from = first + p * chunk;
        Report r = run_agents(endpoint, secret, from, std::min(chunk, n - p * chunk), ready[1], go[0]);
        if (::write(out[1], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) ::_exit(1);
        ::_exit(0);
      }
      ::close(out[1]);
      children.emplace_back(pid, out[0]);
    }
    ::close(go[0]);
    ::close(ready[1]);
    for (int built = 0; built < processes;) {  // every child has built its clients (not measured)
      char byte = 0;
      auto got = ::read(ready[0], &byte, 1);
      if (got == 0) throw std::runtime_error("an agents' process died before it was ready");
      if (got == 1) ++built;
    }
    auto t0 = Clock::now();
    ::close(go[1]);
    Report all;
    std::string first_failure;
    std::int64_t last_start = 0, last_finish = 0;
    for (auto [pid, fd] : children) {
      Report r;
      auto got = ::read(fd, &r, sizeof r);
      ::close(fd);
      int status = 0;
      ::waitpid(pid, &status, 0);
      if (got != static_cast<ssize_t>(sizeof r)) throw std::runtime_error("an agents' process died");
      all.started += r.started;
      all.finished += r.finished;
      all.failed += r.failed;
      last_start = std::max(last_start, r.last_start_ns);
      last_finish = std::max(last_finish, r.last_finish_ns);
      if (first_failure.empty()) first_failure = r.first_failure;
    }
    fmt::print(
        "{{\"agents\": {}, \"processes\": {}, \"started\": {}, \"finished\": {}, \"failed\": {}, "
        "\"all_started_s\": {:.3f}, \"all_finished_s\": {:.3f}, \"first_failure\": \"{}\"}}\n",
        n, processes, all.started, all.finished, all.failed, all.started ? (last_start - ns(t0)) / 1e9 : 0.0,
        all.finished ? (last_finish - ns(t0)) / 1e9 : 0.0,
        first_failure);
    return all.started == n && all.finished == n ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sgpu_rdzv_sim: %s\n", e.what());
    return 1;
  }
}
