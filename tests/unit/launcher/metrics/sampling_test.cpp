// The pure half of metrics/: a /proc stat line, a heartbeat's step, CPU use,
// the median, and which ranks are stragglers.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "sgpu/launcher/metrics/sampling.hpp"

using namespace sgpu::launcher::metrics;

TEST_CASE("a /proc stat line gives the state, CPU ticks, threads and resident pages") {
  struct Row {
    std::string text;
    bool ok;
    char state;
    std::uint64_t ticks;
    int threads;
    std::uint64_t rss;
  };
  // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
  // priority nice num_threads itrealvalue starttime vsize rss ...
  const std::string tail = " 1 1 1 0 -1 4194560 100 0 0 0 150 50 0 0 20 0 7 0 1234 123456789 4321 18446744073709551615";
  std::vector<Row> rows = {
      {"4242 (python3)" + std::string(" R") + tail, true, 'R', 200, 7, 4321},
      // A name with spaces and a ')' of its own: the fields start after the last ')'.
      {"4242 (pt_main thread) x)" + std::string(" S") + tail, true, 'S', 200, 7, 4321},
      {"4242 (python3) S 1 1", false, '?', 0, 0, 0},  // cut short
      {"no parentheses here", false, '?', 0, 0, 0},
      {"4242 (python3) SS" + tail, false, '?', 0, 0, 0},  // not one state letter
      {"4242 (python3) R 1 1 1 0 -1 4194560 100 0 0 0 x 50 0 0 20 0 7 0 1234 123456789 4321 0", false, '?', 0, 0, 0},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    auto st = parse_proc_stat(row.text);
    REQUIRE(st.has_value() == row.ok);
    if (!st) continue;
    CHECK(st->state == row.state);
    CHECK(st->cpu_ticks == row.ticks);
    CHECK(st->threads == row.threads);
    CHECK(st->rss_pages == row.rss);
  }
}

TEST_CASE("a zombie or an exiting process that let its memory go has no figures of its own") {
  struct Row {
    char state;
    std::uint64_t rss;
    bool own;
  };
  std::vector<Row> rows = {
      {'R', 4321, true},  // running
      {'S', 1, true},     // sleeping, one page is enough
      {'D', 4321, true},  // in the disk's wait
      {'T', 4321, true},  // stopped
      {'Z', 0, false},    // exited, not yet reaped
      {'X', 0, false},    // being reaped
      {'R', 0, false},    // in its exit, after its memory went
  };
  for (const auto& row : rows) {
    CAPTURE(row.state);
    CAPTURE(row.rss);
    CHECK(has_own_figures(ProcStat{row.state, 100, 1, row.rss}) == row.own);
  }
}

TEST_CASE("a heartbeat file's step is its last whole line that is a number") {
  struct Row {
    std::string tail;
    bool whole;
    std::optional<std::int64_t> step;
  };
  std::vector<Row> rows = {
      {"", true, std::nullopt},                // only touched
      {"                1200\n", true, 1200},  // sgpu.heartbeat(step=1200)
      {"1200", true, 1200},                    // printf 1200 > file: the whole file
      {"1\n2\n3\n", true, 3},                  // echo $step >> file
      {"1\n2\n3\n4", true, 3},                 // the 4 is being written
      {"7\n\n\n", true, 7},                    // blank lines after it
      {"step 5\n", true, std::nullopt},        // not a number: no step rather than a wrong one
      {"99\n100\n", false, 100},               // a tail: the first line may be cut
      {"9\n", false, std::nullopt},            // a tail of one line: it may be cut
      {"-3\n", true, -3},
  };
  for (const auto& row : rows) {
    CAPTURE(row.tail);
    CHECK(parse_heartbeat_step(row.tail, row.whole) == row.step);
  }
}

TEST_CASE("CPU percent is of one core between two samples") {
  CHECK(cpu_percent(100, 200, 1.0, 100) == doctest::Approx(100));
  CHECK(cpu_percent(100, 150, 2.0, 100) == doctest::Approx(25));
  CHECK(cpu_percent(0, 400, 1.0, 100) == doctest::Approx(400));  // four busy threads
  CHECK(cpu_percent(200, 100, 1.0, 100) == 0);                   // a new process behind the pid
  CHECK(cpu_percent(100, 200, 0, 100) == 0);
}

TEST_CASE("median") {
  CHECK(median({}) == 0);
  CHECK(median({3}) == 3);
  CHECK(median({5, 1, 3}) == 3);
  CHECK(median({4, 1, 3, 2}) == doctest::Approx(2.5));
}

TEST_CASE("a straggler is slower than the others' median by the factor, two samples in a row, reported once") {
  StragglerDetector d({1.5, 2});
  // Sample 1: rank 2 at half the others' rate: slow once, not yet reported.
  CHECK(d.update({{0, 10}, {1, 10}, {2, 5}, {3, 10}}).empty());
  // Sample 2: again: reported, with its rate and the others' median.
  auto found = d.update({{0, 10}, {1, 11}, {2, 5}, {3, 9}});
  REQUIRE(found.size() == 1);
  CHECK(found[0].rank == 2);
  CHECK(found[0].rate == 5);
  CHECK(found[0].median == 10);
  // Still slow: not reported again.
  CHECK(d.update({{0, 10}, {1, 10}, {2, 4}, {3, 10}}).empty());
  CHECK(d.reported().count(2) == 1);
  // A new attempt: forgotten.
  d.reset();
  CHECK(d.reported().empty());
}

TEST_CASE("no straggler within the factor, after a recovery, or alone") {
  StragglerDetector d({1.5, 2});
  // 0.7 of the median is within 1.5x.
  CHECK(d.update({{0, 10}, {1, 10}, {2, 7}}).empty());
  CHECK(d.update({{0, 10}, {1, 10}, {2, 7}}).empty());
  // Slow, then recovered, then slow: never two in a row.
  CHECK(d.update({{0, 10}, {1, 10}, {2, 2}}).empty());
  CHECK(d.update({{0, 10}, {1, 10}, {2, 10}}).empty());
  CHECK(d.update({{0, 10}, {1, 10}, {2, 2}}).empty());
  // One rank has no one to be compared with.
  StragglerDetector alone({1.5, 2});
  CHECK(alone.update({{0, 1}}).empty());
  CHECK(alone.update({{0, 1}}).empty());
  // Every rank stopped: a median of 0 makes no straggler (that is a hang).
  StragglerDetector stopped({1.5, 2});
  CHECK(stopped.update({{0, 0}, {1, 0}}).empty());
  CHECK(stopped.update({{0, 0}, {1, 0}}).empty());
}

TEST_CASE("nodes' samples arrive apart: a rank is compared with the others' newest rates") {
  StragglerDetector d({1.5, 2});
  CHECK(d.update({{0, 10}, {1, 10}}).empty());  // node 0
  CHECK(d.update({{2, 3}, {3, 10}}).empty());   // node 1: rank 2 slow once
  CHECK(d.update({{0, 10}, {1, 10}}).empty());  // node 0 again: rank 2 not sampled, its count stands
  auto found = d.update({{2, 3}, {3, 10}});
  REQUIRE(found.size() == 1);
  CHECK(found[0].rank == 2);
}
