#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cctype>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/launcher/outputs/file_writer_thread.hpp"

using namespace sgpu::launcher;

namespace {
// A FIFO stands in for a disk that lags: the writer thread blocks on it
// until the test reads.
struct Fifo {
  std::filesystem::path path;
  int reader = -1;
  Fifo() {
    char dir[] = "/tmp/sgpu-fifo-XXXXXX";
    REQUIRE(::mkdtemp(dir) != nullptr);
    path = std::filesystem::path(dir) / "log";
    REQUIRE(::mkfifo(path.c_str(), 0600) == 0);
    reader = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // so that the writer's open never blocks
    REQUIRE(reader >= 0);
  }
  ~Fifo() {
    ::close(reader);
    std::filesystem::remove_all(path.parent_path());
  }
  // Everything in the FIFO now, waiting up to `ms` for the first byte.
  std::string take(int ms) {
    std::string got;
    pollfd p{reader, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return got;
    char buf[65536];
    for (ssize_t n; (n = ::read(reader, buf, sizeof buf)) > 0;) got.append(buf, static_cast<std::size_t>(n));
    return got;
  }
};
}  // namespace

TEST_CASE("launcher::FileWriterThread") {
  boost::asio::io_context io;
  Fifo fifo;
  auto file = AppendFile::deferred(fifo.path.string());
  std::string blob;
  for (int i = 0; blob.size() < FileWriterThread::kPauseAt + (1 << 20); ++i) blob += "line " + std::to_string(i) + "\n";

  SUBCASE("a lagging disk pauses the flow; the loop resumes it once the queue drained; every byte in order") {
    FileWriterThread writer(io);
    bool resumed = false;
    std::size_t half = blob.size() / 2;
    writer.append(file, std::string_view(blob).substr(0, half));
    CHECK_FALSE(writer.flow()->paused());  // under kPauseAt
    writer.append(file, std::string_view(blob).substr(half));
    REQUIRE(writer.flow()->paused());  // the FIFO holds 64 KiB: the rest waits
    writer.flow()->when_open([&] { resumed = true; });
    std::string got;
    while (!resumed) {
      got += fifo.take(10);
      io.poll();  // the resume is posted to the loop: it runs here, never on the writer's thread
    }
    CHECK_FALSE(writer.flow()->paused());
    writer.drain();
    got += fifo.take(0);
    CHECK(got == blob);
    CHECK(file.error().empty());
  }
  SUBCASE("the destructor writes what is queued before it returns") {
    {
      FileWriterThread writer(io);
      writer.append(file, "first\n");
      writer.append(file, "second\n");
    }  // both fit in the FIFO: the destructor returns once they are in it
    CHECK(fifo.take(0) == "first\nsecond\n");
  }
  SUBCASE("a big piece is queued by its owner, not copied; a small one is copied") {
    FileWriterThread writer(io);
    auto big = std::make_shared<std::string>(FileWriterThread::kShareFrom, 'b');
    auto small = std::make_shared<std::string>("small\n");
    writer.append(file, *big, big);
    writer.append(file, *small, small);
    // The FIFO holds 64 KiB: the big piece waits in the queue, and so does
    // its owner; the small one was copied, so its owner was never kept.
    CHECK(big.use_count() == 2);
    CHECK(small.use_count() == 1);
    small->assign("CHANGED");
    std::string got;
    while (got.size() < big->size() + 6) {
      io.poll();  // the wake-up
      got += fifo.take(100);
    }
    writer.drain();
    CHECK(got == *big + "small\n");
    CHECK(big.use_count() == 1);  // written: let go
  }
  SUBCASE("a render makes what is written, on the writer's thread, in order with the plain appends") {
    FileWriterThread writer(io);
    auto loop_thread = std::this_thread::get_id();
    std::vector<std::thread::id> render_threads;
    auto upper = [&](std::string_view in, std::string& out) {
      render_threads.push_back(std::this_thread::get_id());
      for (char c : in) out.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    };
    writer.append(file, "one\n", nullptr, upper);
    writer.append(file, "two\n");
    auto big = std::make_shared<std::string>(FileWriterThread::kShareFrom, 'x');
    writer.append(file, *big, big, upper);  // kept by its owner, rendered from it
    writer.append(file, {}, nullptr, [](std::string_view in, std::string& out) {
      out = "held back: " + std::to_string(in.size()) + "\n";  // no bytes, still queued
    });
    const std::string want = "ONE\ntwo\n" + std::string(big->size(), 'X') + "held back: 0\n";
    std::string got;
    for (int tries = 0; got.size() < want.size() && tries < 100; ++tries) {  // at most ~10 s: a failure, not a hang
      io.restart();
      io.poll();
      got += fifo.take(100);
    }
    writer.drain();
    CHECK(got == want);
    REQUIRE(render_threads.size() == 2);
    CHECK(render_threads[0] != loop_thread);
    CHECK(render_threads[1] == render_threads[0]);
  }
  SUBCASE("the loop wakes the writer once per turn: bytes appended in one turn are written after it") {
    FileWriterThread writer(io);
    writer.append(file, "one\n");
    writer.append(file, "two\n");
    CHECK(fifo.take(50).empty());  // the turn that appended has not ended
    CHECK(io.poll() == 1);         // one wake-up for both
    writer.drain();
    CHECK(fifo.take(0) == "one\ntwo\n");
    writer.drain();                  // on an empty queue: leaves the writer asleep, as it was
    writer.append(file, "three\n");  // the queue ran empty: the next byte posts a wake-up again
    CHECK(fifo.take(50).empty());
    io.restart();
    CHECK(io.poll() == 1);
    writer.drain();
    CHECK(fifo.take(0) == "three\n");
  }
  SUBCASE("a writer destroyed before its wake-up ran leaves nothing for the loop to touch") {
    {
      FileWriterThread writer(io);
      writer.append(file, "last\n");
    }  // written by the destructor
    CHECK(fifo.take(0) == "last\n");
    CHECK(io.poll() == 1);  // the late wake-up runs, and does nothing
  }
  SUBCASE("nothing appended: no thread, nothing paused, drain returns at once") {
    FileWriterThread writer(io);
    writer.drain();
    CHECK_FALSE(writer.flow()->paused());
    CHECK(fifo.take(0).empty());
  }
}
