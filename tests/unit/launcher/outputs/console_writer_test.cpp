#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>
#include <csignal>
#include <string>

#include <boost/asio/io_context.hpp>

#include "sgpu/launcher/outputs/console_writer.hpp"
#include "sgpu/launcher/outputs/file_writer_thread.hpp"

using namespace sgpu::launcher;

namespace {
struct Pipe {
  int fd[2] = {-1, -1};
  Pipe() { REQUIRE(::pipe2(fd, O_CLOEXEC) == 0); }
  ~Pipe() {
    for (int f : fd)
      if (f >= 0) ::close(f);
  }
  std::string drain() {
    std::string got;
    char buf[65536];
    ::fcntl(fd[0], F_SETFL, O_NONBLOCK);
    for (ssize_t n; (n = ::read(fd[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
    return got;
  }
};
}  // namespace

TEST_CASE("launcher::ConsoleWriter") {
  boost::asio::io_context io;
  FileWriterThread files(io);
  Pipe pipe;
  int drained = 0;
  std::string blob(1 << 20, 'x');
  for (std::size_t i = 0; i < blob.size(); i += 97) blob[i] = static_cast<char>('a' + i % 26);

  SUBCASE("a reader that does not read never blocks the writer; what waits goes out in order") {
    ConsoleWriter w(
        io, pipe.fd[1], 1024, 8 << 20, [&] { ++drained; }, files);
    w.write(blob);  // far more than a pipe holds: returns at once
    CHECK(w.pending() > 0);
    std::string got = pipe.drain();
    while (w.pending() > 0) {
      io.run_one();
      got += pipe.drain();
    }
    CHECK(got == blob);
    CHECK(drained >= 1);
    CHECK(w.finish(false) == 0);
  }
  SUBCASE("past the limit the console drops and counts; finish without waiting drops the rest") {
    ConsoleWriter w(
        io, pipe.fd[1], 1024, 4096, [&] { ++drained; }, files);
    w.write(blob);
    CHECK(w.pending() == 4096);
    auto dropped = w.finish(false);
    CHECK(dropped == blob.size() - pipe.drain().size());
  }
  SUBCASE("a regular file is written on the file thread, in order, all of it") {
    char path[] = "/tmp/sgpu-console-XXXXXX";
    int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::unlink(path);
    {
      ConsoleWriter w(
          io, fd, 1024, 4096, [&] { ++drained; }, files);
      for (std::size_t at = 0; at < blob.size(); at += 100'000) w.write(std::string_view(blob).substr(at, 100'000));
      CHECK(w.pending() == 0);      // nothing waits on the loop: the thread has it
      CHECK(w.finish(false) == 0);  // a file takes everything, past the limit too
    }
    std::string got(blob.size() + 1, '\0');
    CHECK(::pread(fd, got.data(), got.size(), 0) == static_cast<ssize_t>(blob.size()));
    got.resize(blob.size());
    CHECK(got == blob);
    ::close(fd);
  }
  SUBCASE("a reader that went away breaks the console, silently") {
    ::signal(SIGPIPE, SIG_IGN);
    ::close(std::exchange(pipe.fd[0], -1));
    ConsoleWriter w(
        io, pipe.fd[1], 1024, 4096, [&] { ++drained; }, files);
    w.write("line\n");
    CHECK(w.broken());
    CHECK(w.pending() == 0);
  }
}
