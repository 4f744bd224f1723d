#include <string>

#include <doctest/doctest.h>

#include "sgpu/launcher/outputs/report.hpp"

using namespace sgpu::launcher;
using sgpu::env::ExitStatus;
using sgpu::env::JobEnd;

namespace {
Clock::time_point at(double s) {
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)));
}

RankReport rank(int r, std::optional<ExitStatus> status, bool terminated = false, double secs = 1.5) {
  RankReport out;
  out.rank = r;
  out.host = "node1";
  out.pid = status ? 1000 + r : -1;
  out.status = status;
  out.terminated_by_sgpu = terminated;
  out.started = at(100);
  out.ended = at(100 + secs);
  return out;
}

RunReport failed_run() {
  RunReport rep;
  rep.run_id = "r1";
  rep.run_dir = "/runs/r1";
  rep.end.kind = JobEnd::Kind::RankFailed;
  rep.end.rank = 2;
  rep.end.status = ExitStatus::exited(7);
  rep.exit_code = 7;
  rep.ranks = {rank(0, ExitStatus::killed(15), true), rank(1, ExitStatus::exited(0)),
               rank(2, ExitStatus::exited(7), false, 0.25), rank(3, ExitStatus::killed(9), true, 61)};
  RootCause cause;
  cause.kind = JobEnd::Kind::RankFailed;
  cause.rank = 2;
  cause.message = failure_message(2, "node1", 1002, ExitStatus::exited(7));
  cause.source = "stderr";
  cause.source_path = "/runs/r1/ranks/2/stderr";
  cause.details = "oops\nbad thing\n";
  rep.root_cause = cause;
  return rep;
}
}  // namespace

TEST_CASE("launcher::rank_verdict_name and exit_text") {
  struct Row {
    std::optional<ExitStatus> status;
    bool terminated;
    const char* verdict;
    const char* exit;
  };
  const Row rows[] = {
      {ExitStatus::exited(0), false, "ok", "0"},
      {ExitStatus::exited(3), false, "failed", "3"},
      {ExitStatus::killed(11), false, "failed", "SIGSEGV"},
      {ExitStatus::killed(15), true, "terminated_by_sgpu", "SIGTERM"},
      {ExitStatus::exited(0), true, "ok", "0"},  // stopped, but it had finished cleanly
      {std::nullopt, false, "not_started", "-"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.verdict);
    CHECK(rank_verdict_name(rank(0, row.status, row.terminated)) == row.verdict);
    CHECK(exit_text(row.status) == row.exit);
  }
}

TEST_CASE("launcher::failure_message") {
  CHECK(failure_message(2, "n1", 42, ExitStatus::exited(7)) == "rank 2 (pid 42 on n1) exited with code 7");
  CHECK(failure_message(0, "n1", 42, ExitStatus::killed(11)) ==
        "rank 0 (pid 42 on n1) was killed by SIGSEGV (signal 11)");
}

TEST_CASE("launcher::format_rank_table") {
  auto rep = failed_run();
  CHECK(format_rank_table(rep) ==
        "  rank  host    pid  exit     duration  verdict\n"
        "     0  node1  1000  SIGTERM      1.5s  terminated by sgpu\n"
        "     1  node1  1001  0            1.5s  ok\n"
        "     2  node1  1002  7           250ms  FAILED (root cause)\n"
        "     3  node1  1003  SIGKILL      1m1s  terminated by sgpu\n");
  SUBCASE("over max_rows: the ranks that matter first, the rest counted") {
    auto table = format_rank_table(rep, 2);
    CHECK(table ==
          "  rank  host    pid  exit     duration  verdict\n"
          "     0  node1  1000  SIGTERM      1.5s  terminated by sgpu\n"
          "     2  node1  1002  7           250ms  FAILED (root cause)\n"
          "  ... and 2 more ranks: 1 ok, 1 terminated by sgpu\n");
  }
  SUBCASE("a rank that never started") {
    rep.ranks[3] = rank(3, std::nullopt);
    CHECK(format_rank_table(rep).find("     3  node1     -  -               -  not started\n") != std::string::npos);
  }
}

TEST_CASE("launcher::format_report") {
  SUBCASE("a failure: headline, table, root cause from stderr, where the logs are") {
    auto text = format_report(failed_run());
    CHECK(text.rfind("sgpu: rank 2 failed first: exit 7; 2 other ranks stopped by sgpu (exit code 7)\n", 0) == 0);
    CHECK(text.find("sgpu: root cause: rank 2 (pid 1002 on node1) exited with code 7\n"
                    "  last lines of its stderr (/runs/r1/ranks/2/stderr):\n"
                    "    oops\n"
                    "    bad thing\n") != std::string::npos);
    CHECK(text.find("sgpu: logs: /runs/r1/ranks/<rank>/{stdout,stderr}; summary: /runs/r1/summary.json\n") !=
          std::string::npos);
  }
  SUBCASE("a traceback from the error file") {
    auto rep = failed_run();
    rep.root_cause->source = "error_file";
    rep.root_cause->source_path = "/runs/r1/ranks/2/error.json";
    rep.root_cause->details = "Traceback (most recent call last):\nRuntimeError: boom\n";
    auto text = format_report(rep);
    CHECK(text.find("  traceback (/runs/r1/ranks/2/error.json):\n"
                    "    Traceback (most recent call last):\n"
                    "    RuntimeError: boom\n") != std::string::npos);
  }
  SUBCASE("nothing on stderr") {
    auto rep = failed_run();
    rep.root_cause->details.clear();
    CHECK(format_report(rep).find("it wrote nothing to stderr (/runs/r1/ranks/2/stderr) and left no error file") !=
          std::string::npos);
  }
  SUBCASE("success: one line") {
    RunReport rep;
    rep.run_dir = "/runs/r2";
    rep.started = at(10);
    rep.ended = at(13.2);
    rep.ranks = {rank(0, ExitStatus::exited(0)), rank(1, ExitStatus::exited(0))};
    CHECK(format_report(rep) == "sgpu: 2 ranks exited 0 in 3.2s; logs in /runs/r2\n");
  }
  SUBCASE("timeout: every rank stopped by sgpu, no rank to blame") {
    RunReport rep;
    rep.run_dir = "/runs/r3";
    rep.end.kind = JobEnd::Kind::TimedOut;
    rep.exit_code = 124;
    rep.timeout = sgpu::env::Seconds(1);
    rep.ranks = {rank(0, ExitStatus::killed(15), true), rank(1, ExitStatus::killed(15), true)};
    auto text = format_report(rep);
    CHECK(text.rfind("sgpu: error: the job timed out after 1s (--timeout); 2 ranks stopped by sgpu (exit code 124)\n",
                     0) == 0);
    CHECK(text.find("root cause") == std::string::npos);
  }
  SUBCASE("warnings come first") {
    auto rep = failed_run();
    rep.warnings = {"/runs/r1/ranks/0/stdout: No space left on device"};
    CHECK(format_report(rep).rfind("sgpu: warning: /runs/r1/ranks/0/stdout: No space left on device\n", 0) == 0);
  }
}

TEST_CASE("outputs::escape_controls") {
  struct Row {
    std::string in;
    bool keep_newlines;
    std::string out;
  };
  const Row rows[] = {
      {"plain text, ünïcödé", false, "plain text, ünïcödé"},
      {"\x1b]0;title\x07", false, "\\x1b]0;title\\x07"},
      {"\x1b[2J", true, "\\x1b[2J"},
      {"a\r\nsgpu: fine", false, "a\\r\\nsgpu: fine"},
      {"a\r\nsgpu: fine", true, "a\\r\nsgpu: fine"},
      {"tab\there", false, "tab\\there"},
      {"tab\there", true, "tab\there"},
      {"del\x7f", false, "del\\x7f"},
      {"csi\xc2\x9b"
       "31m",
       false, "csi\\u009b31m"},
      {"nbsp\xc2\xa0", false, "nbsp\xc2\xa0"},
      {std::string("nul\0x", 5), false, "nul\\x00x"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.in);
    CHECK(escape_controls(row.in, row.keep_newlines) == row.out);
  }
}

TEST_CASE("outputs::format_report shows an error file's text escaped") {
  auto rep = failed_run();
  rep.root_cause->message = "rank 2 failed: \x1b[2J\r\nsgpu: all fine";
  rep.root_cause->source = "error_file";
  rep.root_cause->details = "Traceback:\n\x1b]0;pwned\x07";
  auto text = format_report(rep);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find('\r') == std::string::npos);
  CHECK(text.find("\nsgpu: all fine") == std::string::npos);
  CHECK(text.find("    Traceback:\n    \\x1b]0;pwned\\x07\n") != std::string::npos);
}
