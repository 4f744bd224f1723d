#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <system_error>

#include <doctest/doctest.h>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "sgpu/launcher/process/child_process.hpp"

using namespace sgpu::launcher;
namespace asio = boost::asio;
namespace fs = std::filesystem;

namespace {

// A scratch directory, removed with the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "sgpu-child-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

void write_file(const fs::path& p, const std::string& text, fs::perms perms) {
  std::ofstream(p) << text;
  fs::permissions(p, perms);
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ChildOptions sh(const std::string& script) {
  ChildOptions o;
  o.argv = {"sh", "-c", script};
  return o;
}

// Runs the loop until `child` has exited and `out` (if a pipe) is read to its end.
int run_to_end(asio::io_context& io, ChildProcess& child, std::string* out = nullptr) {
  std::optional<int> status;
  child.async_wait([&](int s) { status = s; });
  if (out) {
    boost::system::error_code ec;
    asio::read(child.out(), asio::dynamic_buffer(*out), ec);
  }
  while (!status) io.run_one();
  return *status;
}

}  // namespace

TEST_CASE("launcher::find_on_path") {
  TempDir a, b;
  write_file(a.path / "tool", "#!/bin/sh\n", fs::perms::owner_read);  // not executable: skipped
  write_file(b.path / "tool", "#!/bin/sh\n", fs::perms::owner_all);
  fs::create_directory(a.path / "dir");  // a directory is never a program
  sgpu::env::Environment env{{"PATH", "::" + a.path.string() + ":" + b.path.string()}};
  CHECK(find_on_path("tool", env) == (b.path / "tool").string());
  CHECK(find_on_path("dir", env).empty());
  CHECK(find_on_path("no-such-tool-sgpu", env).empty());
  SUBCASE("a name with a slash is taken as it is") { CHECK(find_on_path("./x/y", env) == "./x/y"); }
  SUBCASE("no PATH: the default") { CHECK(find_on_path("sh", sgpu::env::Environment{}) != ""); }
  SUBCASE("sgpu's own PATH") { CHECK(find_on_path("sh") != ""); }
}

TEST_CASE("launcher::ChildProcess") {
  asio::io_context io;

  SUBCASE("stdout on a pipe, the raw wait status") {
    auto o = sh("echo hello; exit 3");
    o.out = ChildStream::pipe();
    ChildProcess child(io, o);
    std::string out;
    int status = run_to_end(io, child, &out);
    CHECK(out == "hello\n");
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    CHECK(child.exited());
  }

  SUBCASE("stdin a pipe, its environment and directory") {
    TempDir dir;
    auto o = sh("read line; echo \"$line $GREETING $(pwd)\"");
    o.environment = sgpu::env::Environment{{"GREETING", "hi"}, {"PATH", "/usr/bin:/bin"}};
    o.cwd = dir.path.string();
    o.in = ChildStream::pipe();
    o.out = ChildStream::pipe();
    ChildProcess child(io, o);
    asio::write(child.in(), asio::buffer(std::string("ping\n")));
    child.in().close();
    std::string out;
    CHECK(run_to_end(io, child, &out) == 0);
    CHECK(out == "ping hi " + fs::canonical(dir.path).string() + "\n");
  }

  SUBCASE("stdin and stderr as files, a blocking wait") {
    TempDir dir;
    write_file(dir.path / "in", "from a file\n", fs::perms::owner_read | fs::perms::owner_write);
    auto o = sh("cat >&2");
    o.in = ChildStream::path((dir.path / "in").string());
    o.err = ChildStream::path((dir.path / "err").string());
    ChildProcess child(io, o);
    CHECK(child.wait() == 0);
    CHECK(child.wait() == 0);  // once reaped, the status stays
    CHECK(read_file(dir.path / "err") == "from a file\n");
  }

  SUBCASE("its own process group, signalled as a whole") {
    auto o = sh("sleep 30 & wait");
    ChildProcess child(io, o);
    CHECK(::getpgid(child.pid()) == child.pid());
    CHECK(::getsid(child.pid()) == ::getsid(0));  // sgpu's session: only ranks get their own
    child.signal_group(SIGTERM);
    int status = run_to_end(io, child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGTERM);
    child.signal(SIGKILL);  // reaped: nothing, and no other process
  }

  SUBCASE("not on the PATH: ENOENT naming the program") {
    ChildOptions o;
    o.argv = {"no-such-program-sgpu"};
    try {
      ChildProcess child(io, o);
      FAIL("started");
    } catch (const std::system_error& e) {
      CHECK(e.code().value() == ENOENT);
      CHECK(std::string(e.what()).find("no-such-program-sgpu") != std::string::npos);
    }
  }

  SUBCASE("a missing stdin file: the file's error") {
    auto o = sh("true");
    o.in = ChildStream::path("/nonexistent/sgpu-input");
    CHECK_THROWS_AS(ChildProcess(io, o), std::system_error);
  }

  SUBCASE("destroyed while running: killed and reaped, its callback never called") {
    pid_t pid = 0;
    bool called = false;
    {
      ChildProcess child(io, sh("sleep 30"));
      pid = child.pid();
      child.async_wait([&](int) { called = true; });
    }
    io.run();
    CHECK_FALSE(called);
    CHECK(::kill(pid, 0) != 0);  // gone, not a zombie of ours
    CHECK(::waitpid(pid, nullptr, WNOHANG) < 0);
  }

  SUBCASE("detached: left running") {
    pid_t pid = 0;
    {
      ChildProcess child(io, sh("sleep 30"));
      pid = child.pid();
      child.detach();
    }
    CHECK(::kill(pid, 0) == 0);
    ::kill(pid, SIGKILL);
    CHECK(::waitpid(pid, nullptr, 0) == pid);
  }
}

// The reactor may hand a child's wait a readiness that was not its own: a
// descriptor closed while its event was still queued leaves that event to
// whatever descriptor reuses its reactor state (Asio's epoll reactor). In
// sgpu this was a reaped squeue's pidfd waking the srun step's wait, which
// then blocked the loop in waitpid until srun ended: the rendezvous accepted
// no agent meanwhile. A wait must take such a wake for a hint, not an exit.
TEST_CASE("launcher::ChildProcess: a readiness left by a closed descriptor does not block the loop") {
  using Clock = std::chrono::steady_clock;
  asio::io_context io;
  int ends[2];
  REQUIRE(::pipe2(ends, O_CLOEXEC) == 0);
  auto other = std::make_unique<asio::readable_pipe>(io, ends[0]);  // no read pending on it
  std::unique_ptr<ChildProcess> child;
  std::optional<int> status;
  std::optional<Clock::duration> timer_fired;
  asio::steady_timer timer(io);
  auto started = Clock::now();
  // The loop runs the reactor (which queues `other`'s readiness) between the
  // write and the handler that closes `other` and starts the child, which
  // takes over its reactor state; the queued readiness is then delivered to it.
  asio::post(io, [&] {
    REQUIRE(::write(ends[1], "x", 1) == 1);
    asio::post(io, [&] {
      other.reset();
      child = std::make_unique<ChildProcess>(io, sh("sleep 2"));
      child->async_wait([&](int s) { status = s; });
      timer.expires_after(std::chrono::milliseconds(100));
      timer.async_wait([&](boost::system::error_code) { timer_fired = Clock::now() - started; });
    });
  });
  while (!status) io.run_one();
  ::close(ends[1]);
  REQUIRE(timer_fired);
  CHECK(*timer_fired < std::chrono::seconds(1));  // not held until the child's exit
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
}
