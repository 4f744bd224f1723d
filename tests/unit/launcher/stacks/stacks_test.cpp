// The pure half of stacks/: a tool's output parsed, ranks grouped by stack,
// the odd ones out found, and the one-sentence verdict.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"

using namespace sgpu::launcher;

namespace {

StackFrame user(const std::string& name, int line) { return {name, "train.py", "/job/train.py", line}; }
StackFrame torch(const std::string& name, int line) {
  return {name, "torch/distributed/distributed_c10d.py",
          "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line};
}
StackFrame stdlib(const std::string& name, int line) {
  return {name, "threading.py", "/usr/lib/python3.11/threading.py", line};
}

RankStack rank(int r, std::vector<StackFrame> frames, std::string host = "") {
  RankStack s;
  s.rank = r;
  s.pid = 100 + r;
  s.host = std::move(host);
  s.tool = "py-spy";
  s.threads.push_back({"MainThread", 100 + r, true, std::move(frames)});
  return s;
}

RankStack unreadable(int r, std::string why) {
  RankStack s;
  s.rank = r;
  s.pid = 100 + r;
  s.error = std::move(why);
  return s;
}

std::vector<StackFrame> waiting() { return {torch("all_reduce", 1536), user("step", 20), user("<module>", 40)}; }

}  // namespace

TEST_CASE("stacks: rank ranges read as a person writes them") {
  struct Row {
    std::vector<int> ranks;
    std::string text;
  };
  for (const auto& row : {Row{{}, ""}, Row{{3}, "3"}, Row{{0, 1, 2}, "0-2"}, Row{{0, 1, 2, 4, 5, 6, 7}, "0-2,4-7"},
                          Row{{1, 3, 5}, "1,3,5"}, Row{{0, 1, 3, 4}, "0-1,3-4"}}) {
    CAPTURE(row.text);
    CHECK(rank_ranges(row.ranks) == row.text);
  }
}

TEST_CASE("stacks: library frames and collective frames") {
  struct Row {
    StackFrame frame;
    bool library;
    bool collective;
  };
  for (const auto& row : {
           Row{user("step", 20), false, false},
           Row{torch("all_reduce", 1536), true, true},
           Row{stdlib("wait", 320), true, false},
           Row{{"<module>", "<frozen runpy>", "<frozen runpy>", 88}, true, false},
           Row{{"ncclAllReduce", "", "", 0}, true, true},
           Row{{"work", "x.py", "/venv/lib/python3.11/site-packages/pkg/x.py", 3}, true, false},
           Row{{"barrier", "train.py", "/job/train.py", 9},
               false,
               true},  // a name alone: only inside libraries it counts
           Row{{"pthread_cond_wait", "libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0}, true, false},
       }) {
    CAPTURE(row.frame.name);
    CHECK(is_library_frame(row.frame) == row.library);
    CHECK(is_collective_frame(row.frame) == row.collective);
  }
}

TEST_CASE("stacks: grouping and the odd ones out") {
  SUBCASE("one rank outside the collective the others wait in") {
    std::vector<RankStack> stacks{rank(0, waiting()), rank(1, waiting()),
                                  rank(2, {user("load", 12), user("<module>", 38)}), rank(3, waiting())};
    auto r = analyse_stacks(stacks);
    REQUIRE(r.groups.size() == 2);
    CHECK(r.groups[0].ranks == std::vector<int>{0, 1, 3});
    CHECK(r.groups[0].in_collective);
    CHECK_FALSE(r.groups[0].odd);
    CHECK(r.groups[0].summary ==
          "all_reduce  torch/distributed/distributed_c10d.py:1536 <- step  train.py:20 <- <module>  train.py:40");
    CHECK(r.groups[1].odd);
    CHECK(r.odd_ranks == std::vector<int>{2});
    CHECK(r.verdict ==
          "the odd one out: rank 2 (pid 102) at train.py:12 in load; the other 3 are in all_reduce  "
          "torch/distributed/distributed_c10d.py:1536");
  }
  SUBCASE("the host is named on many nodes") {
    std::vector<RankStack> stacks{rank(0, waiting(), "a"), rank(1, waiting(), "a"), rank(2, {user("load", 12)}, "b"),
                                  rank(3, waiting(), "b")};
    auto r = analyse_stacks(stacks);
    CHECK(r.verdict.find("rank 2 on b (pid 102) at train.py:12 in load") != std::string::npos);
    CHECK(format_stack_report(r, stacks).find("ranks 0-1,3 on a,b (3 of 4)") != std::string::npos);
  }
  SUBCASE("everyone at one place: no odd one out, a hint at the network") {
    std::vector<RankStack> stacks{rank(0, waiting()), rank(1, waiting())};
    auto r = analyse_stacks(stacks);
    CHECK(r.groups.size() == 1);
    CHECK(r.odd_ranks.empty());
    CHECK(r.verdict.rfind("every rank is at the same place", 0) == 0);
  }
  SUBCASE("no collective anywhere: the minority at another line of the user's code") {
    std::vector<RankStack> stacks{rank(0, {user("a", 1)}), rank(1, {user("a", 1)}), rank(2, {user("a", 1)}),
                                  rank(3, {user("b", 2)})};
    auto r = analyse_stacks(stacks);
    CHECK(r.odd_ranks == std::vector<int>{3});
  }
  SUBCASE("two halves: nobody can be named") {
    std::vector<RankStack> stacks{rank(0, {user("a", 1)}), rank(1, {user("b", 2)})};
    auto r = analyse_stacks(stacks);
    CHECK(r.odd_ranks.empty());
    CHECK(r.verdict == "the ranks are at 2 places of equal size: no odd one out");
  }
  SUBCASE("entering and inside the same collective are one place") {
    std::vector<RankStack> stacks{rank(0, waiting()), rank(1, {torch("_check", 90), user("step", 20)}),
                                  rank(2, {user("load", 12)})};
    auto r = analyse_stacks(stacks);
    CHECK(r.groups.size() == 3);
    CHECK(r.odd_ranks == std::vector<int>{2});
  }
  SUBCASE("ranks that could not be read are listed, never guessed") {
    std::vector<RankStack> stacks{rank(0, waiting()), unreadable(1, "the rank exited while its stack was taken"),
                                  rank(2, waiting())};
    auto r = analyse_stacks(stacks);
    CHECK(r.unreadable == std::vector<int>{1});
    CHECK(r.verdict.find("(rank 1 not read)") != std::string::npos);
    CHECK(format_stack_report(r, stacks).find("rank 1: not read: the rank exited") != std::string::npos);
  }
  SUBCASE("--native: unresolved addresses do not tell ranks apart") {
    auto native = [](const std::string& address) {
      return std::vector<StackFrame>{{address, "libc.so.6", "/usr/lib/libc.so.6", 0},
                                     {"pthread_cond_wait", "libc.so.6", "/usr/lib/libc.so.6", 0},
                                     torch("all_reduce", 1536),
                                     user("step", 20)};
    };
    auto r = analyse_stacks({rank(0, native("0x7f9c69f07f16")), rank(1, native("0x7f8257ec6f16"))});
    REQUIRE(r.groups.size() == 1);
    CHECK(r.groups[0].summary.rfind("pthread_cond_wait  libc.so.6:0 <- step  train.py:20", 0) == 0);
  }
  SUBCASE("nothing readable") {
    auto r = analyse_stacks({unreadable(0, "x")});
    CHECK(r.groups.empty());
    CHECK(r.verdict.rfind("no rank's stack could be read", 0) == 0);
  }
}

TEST_CASE("stacks: py-spy's JSON and eu-stack's text") {
  auto threads = parse_py_spy_json(R"([
    {"pid": 7, "thread_id": 1, "thread_name": "Thread-1", "os_thread_id": 9, "frames": [
      {"name": "run", "filename": "/usr/lib/python3.11/threading.py", "short_filename": "threading.py", "line": 982}]},
    {"pid": 7, "thread_id": 2, "thread_name": "MainThread", "os_thread_id": 7, "frames": [
      {"name": "inner", "filename": "/tmp/hang.py", "short_filename": "hang.py", "line": 3},
      {"name": "<module>", "filename": "/tmp/hang.py", "short_filename": "hang.py", "line": 7}]}])",
                                   7);
  REQUIRE(threads.size() == 2);
  CHECK_FALSE(threads[0].main);
  CHECK(threads[1].main);
  CHECK(threads[1].frames[0] == StackFrame{"inner", "hang.py", "/tmp/hang.py", 3});
  CHECK_THROWS_AS(parse_py_spy_json("Error: no", 7), sgpu::Error);

  auto native = parse_eu_stack(
      "PID 12 - process\nTID 12:\n#0  0x00007f3a5c8e4e8a __nanosleep\n#1  0x000055d0 main\n"
      "TID 13:\n#0  0x00007f3a5c8e4e8a __futex_wait\n",
      12);
  REQUIRE(native.size() == 2);
  CHECK(native[0].main);
  CHECK(native[0].frames.size() == 2);
  CHECK(native[0].frames[1].name == "main");
  CHECK(native[1].frames[0].name == "__futex_wait");
}

TEST_CASE("stacks: a node's answer survives the wire and fits its frame") {
  std::vector<RankStack> stacks{rank(4, waiting(), "b"), unreadable(5, "py-spy may not trace it")};
  stacks[0].threads.push_back({"loader", 1, false, {stdlib("wait", 320)}});
  auto back = rank_stacks_from_json(nlohmann::json::parse(fit_stacks(stacks, 1 << 20)));
  REQUIRE(back.size() == 2);
  CHECK(back[0].threads == stacks[0].threads);
  CHECK(back[1].error == "py-spy may not trace it");
  // Too big: other threads go first, then outer frames; the main thread's innermost frame stays.
  auto small = rank_stacks_from_json(nlohmann::json::parse(fit_stacks(stacks, 560)));
  REQUIRE(small[0].threads.size() == 1);
  CHECK(small[0].threads[0].main);
  CHECK(small[0].threads[0].frames.front().name == "all_reduce");
  CHECK_THROWS_AS(rank_stacks_from_json(nlohmann::json::parse(R"([{"rank": 1}])")), sgpu::Error);
}
