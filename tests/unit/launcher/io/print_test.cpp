#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <string>
#include <thread>

#include <doctest/doctest.h>

#include "sgpu/launcher/io/print.hpp"

using namespace sgpu::launcher;

TEST_CASE("outputs::write_all") {
  SUBCASE("a full device is ENOSPC, not an exception") {
    int fd = ::open("/dev/full", O_WRONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    CHECK(write_all(fd, "sgpu: warning: x\n") == ENOSPC);
    ::close(fd);
  }
  SUBCASE("a pipe without a reader is EPIPE, not a death by SIGPIPE") {
    auto old = std::signal(SIGPIPE, SIG_IGN);  // as sgpu's main does
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC) == 0);
    ::close(p[0]);
    CHECK(write_all(p[1], "lost") == EPIPE);
    ::close(p[1]);
    std::signal(SIGPIPE, old);
  }
  SUBCASE("a non-blocking pipe fuller than its buffer gets every byte") {
    int p[2];
    REQUIRE(::pipe2(p, O_CLOEXEC | O_NONBLOCK) == 0);
    std::string text(1 << 20, 'x');
    std::string got;
    std::thread reader([&] {
      ::fcntl(p[0], F_SETFL, 0);
      char buf[65536];
      for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
    });
    CHECK(write_all(p[1], text) == 0);
    ::close(p[1]);
    reader.join();
    ::close(p[0]);
    CHECK(got == text);
  }
  SUBCASE("nothing to write") { CHECK(write_all(-1, "") == 0); }
}

TEST_CASE("outputs::output_failure_message") {
  struct Row {
    int fd;
    int error;
    const char* message;
  };
  const Row rows[] = {
      {1, ENOSPC, "cannot write to stdout: No space left on device"},
      {2, EIO, "cannot write to stderr: Input/output error"},
      {1, EPIPE, ""},  // the reader stopped reading: nothing to say
  };
  for (const auto& row : rows) {
    CAPTURE(row.error);
    CHECK(output_failure_message(row.fd, row.error) == row.message);
  }
}
