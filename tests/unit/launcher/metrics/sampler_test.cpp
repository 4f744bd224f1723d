// The sampler against real processes: a running rank is sampled, a rank that
// has exited but is not yet reaped (a zombie) is not, so no sample shows a
// rank at 0 MB in the instant before its exit is seen.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <csignal>

#include "sgpu/launcher/metrics/sampler.hpp"

using namespace sgpu::launcher;

TEST_CASE("a sample holds the running ranks and leaves out one that exited before its reaping") {
  int running = ::fork();
  REQUIRE(running >= 0);
  if (running == 0) {
    ::pause();
    ::_exit(0);
  }
  int exited = ::fork();
  REQUIRE(exited >= 0);
  if (exited == 0) ::_exit(0);
  siginfo_t info{};  // wait for the exit without reaping it
  REQUIRE(::waitid(P_PID, static_cast<id_t>(exited), &info, WEXITED | WNOWAIT) == 0);

  boost::asio::io_context io;
  metrics::Sampler sampler(
      io, metrics::SamplerOptions{},
      [&] {
        return std::vector<RunningRank>{{0, running}, {1, exited}};
      },
      [](const NodeSample&) {});
  auto s = sampler.sample();
  ::kill(running, SIGKILL);
  ::waitpid(running, nullptr, 0);
  ::waitpid(exited, nullptr, 0);
  REQUIRE(s.ranks.size() == 1);
  CHECK(s.ranks[0].rank == 0);
  CHECK(s.ranks[0].rss_bytes > 0);
}
