#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/outputs/console.hpp"
#include "sgpu/launcher/outputs/status_line.hpp"

using namespace sgpu::launcher;

namespace {
// Feeds `chunks` one by one; returns the segments, then "|" and the tail finish() gives.
std::vector<std::string> split(const std::vector<std::string>& chunks, std::size_t max = LineSplitter::kMaxSegment) {
  LineSplitter s(max);
  std::vector<std::string> out;
  for (const auto& c : chunks) s.feed(c, [&](std::string_view seg) { out.emplace_back(seg); });
  out.emplace_back("|" + s.finish());
  return out;
}
}  // namespace

TEST_CASE("launcher::LineSplitter") {
  struct Row {
    const char* what;
    std::vector<std::string> chunks;
    std::vector<std::string> segments;
    std::size_t max = LineSplitter::kMaxSegment;
  };
  const Row rows[] = {
      {"whole lines", {"a\nbb\n"}, {"a\n", "bb\n", "|"}},
      {"a line across chunks", {"he", "llo\nwor", "ld\n"}, {"hello\n", "world\n", "|"}},
      {"last line without newline", {"a\nlast"}, {"a\n", "|last"}},
      {"empty chunks", {"", "x\n", ""}, {"x\n", "|"}},
      {"empty lines", {"\n\n"}, {"\n", "\n", "|"}},
      {"progress redraws are segments", {"10%\r20%\r30%\n"}, {"10%\r", "20%\r", "30%\n", "|"}},
      {"crlf is one terminator", {"a\r\nb\r\n"}, {"a\r\n", "b\r\n", "|"}},
      {"crlf across chunks", {"a\r", "\nb\n"}, {"a\r\n", "b\n", "|"}},
      {"cr held at chunk end, then text", {"10%\r", "20%\r", "x"}, {"10%\r", "20%\r", "|x"}},
      {"cr last of the stream", {"done\r"}, {"|done\r"}},
      {"non-UTF-8 bytes pass", {std::string("\xff\xfe\x00z\n", 5)}, {std::string("\xff\xfe\x00z\n", 5), "|"}},
      {"long line cut at max", {"abcdefg\n"}, {"abc", "def", "g\n", "|"}, 3},
      {"long partial cut at max", {"ab", "cd", "ef"}, {"abc", "|def"}, 3},
      {"partial then long line", {"a", "bcdef\n"}, {"abc", "def", "\n", "|"}, 3},
      {"exactly max", {"abc\n"}, {"abc", "\n", "|"}, 3},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    CHECK(split(row.chunks, row.max) == row.segments);
  }
}

TEST_CASE("launcher::LineSplitter keeps every byte") {
  // Whatever the chunking, the segments and the tail are the stream itself.
  std::string stream;
  for (int i = 0; i < 2000; ++i) stream += static_cast<char>((i * 7919) % 256);
  for (std::size_t chunk : {1, 2, 3, 7, 64, 4096}) {
    for (std::size_t max : {5, 100, 1 << 20}) {
      LineSplitter s(max);
      std::string joined;
      for (std::size_t i = 0; i < stream.size(); i += chunk)
        s.feed(std::string_view(stream).substr(i, chunk), [&](std::string_view seg) {
          CHECK(seg.size() <= max + 1);
          joined += seg;
        });
      joined += s.finish();
      CHECK(joined == stream);
    }
  }
}

TEST_CASE("launcher::rank_prefix") {
  CHECK(rank_prefix("3", 3, false) == "[3] ");
  CHECK(rank_prefix("node1:3", 3, false) == "[node1:3] ");
  CHECK(rank_prefix("0", 0, true) == "\x1b[36m[0]\x1b[0m ");
  CHECK(rank_prefix("1", 1, true) == "\x1b[33m[1]\x1b[0m ");
  CHECK(rank_prefix("10", 10, true) == "\x1b[36m[10]\x1b[0m ");  // colours cycle
}

TEST_CASE("launcher::format_status") {
  CHECK(format_clock(sgpu::env::Seconds(0.9)) == "0:00:00");
  CHECK(format_clock(sgpu::env::Seconds(83)) == "0:01:23");
  CHECK(format_clock(sgpu::env::Seconds(10717)) == "2:58:37");
  CHECK(format_clock(sgpu::env::Seconds(-3)) == "0:00:00");
  StatusSnapshot s;
  s.world_size = 8;
  s.running = 6;
  s.exited = 2;
  s.elapsed = sgpu::env::Seconds(83);
  CHECK(format_status(s) == "sgpu: 6 running, 2 exited of 8 | 0:01:23 elapsed");
  s.failed = 1;
  s.left = sgpu::env::Seconds(10717);
  CHECK(format_status(s) == "sgpu: 6 running, 2 exited (1 failed) of 8 | 0:01:23 elapsed | 2:58:37 left");
  s.stopping = "timed out";
  CHECK(format_status(s) ==
        "sgpu: stopping (timed out): 6 running, 2 exited (1 failed) of 8 | 0:01:23 elapsed | 2:58:37 left");
  s.stopping.clear();
  s.network_check_ms = 0.432;
  CHECK(format_status(s) ==
        "sgpu: 6 running, 2 exited (1 failed) of 8 | 0:01:23 elapsed | 2:58:37 left | network checked in 0.4ms");
}

TEST_CASE("launcher::restart_line") {
  sgpu::env::JobEnd end;
  end.kind = sgpu::env::JobEnd::Kind::RankFailed;
  end.rank = 1;
  end.status = sgpu::env::ExitStatus::exited(3);
  SUBCASE("the attempt that ended, its cause, which restart and the wait") {
    CHECK(restart_line(1, 2, end, sgpu::env::Seconds{1}) ==
          "sgpu: attempt 0 ended: rank 1 failed first: exit 3 (exit code 3); restart 1 of 2 in 1s\n");
  }
  SUBCASE("a signal and a long wait") {
    end.status = sgpu::env::ExitStatus::killed(9);
    CHECK(restart_line(3, 5, end, sgpu::env::Seconds{60}) ==
          "sgpu: attempt 2 ended: rank 1 failed first: SIGKILL (signal 9) (exit code 137); restart 3 of 5 in 1m\n");
  }
}
