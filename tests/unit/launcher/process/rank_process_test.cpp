#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "sgpu/launcher/process/rank_process.hpp"

using namespace sgpu::launcher;
namespace asio = boost::asio;

namespace {

RankLaunch shell_rank(int rank, const std::string& script) {
  RankLaunch launch;
  launch.rank = rank;
  launch.executable = "/bin/sh";
  launch.argv = {"sh", "-c", script};
  launch.env = {{"RANK", std::to_string(rank)}, {"PATH", "/usr/bin:/bin"}};
  return launch;
}

// Reads the rank's stdout to its end (EOF: no one else holds the pipe's
// write end, or the test fails after 10 s) and reaps it: its output and raw
// wait status.
std::pair<std::string, int> run_to_end(RankProcess& rank) {
  std::string out;
  pollfd readable{rank.out().native_handle(), POLLIN, 0};
  char chunk[4096];
  for (;;) {
    REQUIRE_MESSAGE(::poll(&readable, 1, 10000) == 1, "no end of file on the rank's stdout: its write end is held");
    ssize_t n = ::read(readable.fd, chunk, sizeof chunk);
    if (n <= 0) break;
    out.append(chunk, static_cast<std::size_t>(n));
  }
  int status = -1;
  ::waitpid(rank.pid(), &status, 0);
  return {out, status};
}

}  // namespace

// A batch of ranks exec beside sgpu and beside each other; more of them
// than children in flight at once, so each set of slots and stack is used
// again while other children still start.
TEST_CASE("launcher::RankProcess: a batch started in the background") {
  asio::io_context io;
  std::vector<RankLaunch> launches;
  for (int r = 0; r < 20; ++r) launches.push_back(shell_rank(r, "echo rank $RANK; exit $RANK"));

  SUBCASE("every rank its own program, environment, pipes, group and exit code") {
    std::vector<std::unique_ptr<RankProcess>> ranks;
    for (const auto& l : launches)
      ranks.push_back(std::make_unique<RankProcess>(io, l, RankProcess::InBackground{}, nullptr, 0, nullptr));
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      CAPTURE(r);
      CHECK(ranks[r]->start_error() == 0);
      pid_t pid = ranks[r]->pid();
      pid_t group = ::getpgid(pid);
      auto [out, status] = run_to_end(*ranks[r]);
      CHECK(group == pid);  // its own group (and session) once started
      CHECK(out == "rank " + std::to_string(r) + "\n");
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == static_cast<int>(r));
    }
  }

  SUBCASE("a rank that cannot start: its own errno, the others unharmed") {
    std::filesystem::path not_executable = std::filesystem::temp_directory_path() / "sgpu-rank-not-executable";
    {
      std::FILE* f = std::fopen(not_executable.c_str(), "w");
      std::fclose(f);
    }
    std::filesystem::permissions(not_executable, std::filesystem::perms::owner_read);
    struct Case {
      std::size_t rank;
      std::string executable;
      std::string cwd;
      int error;
    };
    std::vector<Case> cases = {
        {3, "/nonexistent/sgpu-train", "", ENOENT},
        {9, not_executable.string(), "", EACCES},
        {14, "/bin/sh", "/nonexistent/sgpu-dir", ENOENT},
    };
    for (const auto& c : cases) {
      launches[c.rank].executable = c.executable;
      launches[c.rank].cwd = c.cwd;
    }
    std::vector<std::unique_ptr<RankProcess>> ranks;
    for (const auto& l : launches)
      ranks.push_back(std::make_unique<RankProcess>(io, l, RankProcess::InBackground{}, nullptr, 0, nullptr));
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      CAPTURE(r);
      int expected = 0;
      for (const auto& c : cases)
        if (c.rank == r) expected = c.error;
      CHECK(ranks[r]->start_error() == expected);
      auto [out, status] = run_to_end(*ranks[r]);
      CHECK(WIFEXITED(status));
      CHECK(WEXITSTATUS(status) == (expected != 0 ? 127 : static_cast<int>(r)));
      if (expected == 0) CHECK(out == "rank " + std::to_string(r) + "\n");
    }
    std::filesystem::remove(not_executable);
  }

  SUBCASE("destroyed before its start settled: killed and reaped") {
    std::vector<pid_t> pids;
    for (int round = 0; round < 3; ++round) {
      RankProcess rank(io, shell_rank(round, "sleep 30"), RankProcess::InBackground{}, nullptr, 0, nullptr);
      pids.push_back(rank.pid());
    }
    for (pid_t pid : pids) {
      CHECK(::kill(pid, 0) != 0);  // gone, not a zombie of ours
      CHECK(::waitpid(pid, nullptr, WNOHANG) < 0);
    }
  }
}
