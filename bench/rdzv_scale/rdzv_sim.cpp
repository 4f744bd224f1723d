// sgpu_rdzv_sim HOST:PORT N FIRST_NODE_RANK: N simulated agents, all on one
// event loop, join a real launcher's rendezvous (secret in SGPU_RDZV_SECRET)
// as node ranks FIRST_NODE_RANK.., each with one rank that exits 0 at once.
// Prints JSON: seconds from the first connect until every agent was started
// (the rendezvous is complete) and until every agent was told to finish.
#include <sys/resource.h>
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

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: sgpu_rdzv_sim HOST:PORT AGENTS FIRST_NODE_RANK (secret in SGPU_RDZV_SECRET)\n");
    return 2;
  }
  try {
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    lim.rlim_cur = lim.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &lim);
    auto endpoint = parse_endpoint(argv[1], "HOST:PORT");
    int n = std::atoi(argv[2]);
    int first = std::atoi(argv[3]);
    auto secret = find_secret(sgpu::env::current_environment(), "", "--rdzv-secret-file");
    boost::asio::io_context io(1);
    Stats stats;
    std::vector<std::unique_ptr<SimAgent>> agents;
    std::vector<std::unique_ptr<RendezvousClient>> clients;
    for (int i = 0; i < n; ++i) {
      auto a = std::make_unique<SimAgent>();
      a->node_rank = first + i;
      a->stats = &stats;
      ClientOptions o;
      o.endpoint = endpoint;
      o.join_timeout = std::chrono::seconds(60);
      clients.push_back(std::make_unique<RendezvousClient>(io, o, secret, *a));
      a->client = clients.back().get();
      agents.push_back(std::move(a));
    }
    stats.t0 = Clock::now();
    for (auto& c : clients) c->start();
    io.run();
    fmt::print(
        "{{\"agents\": {}, \"started\": {}, \"finished\": {}, \"failed\": {}, \"all_started_s\": {:.3f}, "
        "\"all_finished_s\": {:.3f}, \"first_failure\": \"{}\"}}\n",
        n, stats.started, stats.finished, stats.failed, seconds(stats.last_start - stats.t0),
        seconds(stats.last_finish - stats.t0), stats.first_failure);
    return stats.started == n && stats.finished == n ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sgpu_rdzv_sim: %s\n", e.what());
    return 1;
  }
}
