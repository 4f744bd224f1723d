#include <csignal>
#include <string>

#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/stop_signal.hpp"

using sgpu::env::parse_signal;
using sgpu::env::parse_signal_before;

namespace {
std::string error_of(auto&& call) {
  try {
    call();
  } catch (const sgpu::Error& e) {
    CHECK(e.exit_code() == 2);
    return e.what();
  }
  return "accepted";
}
}  // namespace

TEST_CASE("env::parse_signal") {
  struct Row {
    const char* text;
    int signal;
  };
  const Row rows[] = {{"TERM", SIGTERM}, {"SIGTERM", SIGTERM}, {"usr2", SIGUSR2}, {"SigUsr1", SIGUSR1},
                      {"INT", SIGINT},   {"HUP", SIGHUP},      {"10", 10},        {"15", SIGTERM}};
  for (const auto& row : rows) {
    CAPTURE(row.text);
    CHECK(parse_signal(row.text, "--stop-signal") == row.signal);
  }
  SUBCASE("what no rank can catch, or no signal at all, is refused naming the flag and what is valid") {
    const char* bad[] = {"KILL", "SIGSTOP", "9", "0", "999", "TERMX", "", "-15", "15x"};
    for (const char* text : bad) {
      CAPTURE(text);
      auto message = error_of([&] { parse_signal(text, "--stop-signal"); });
      CHECK(message.starts_with(std::string("--stop-signal ") + text + ":"));
      CHECK(message.find("e.g. TERM, INT, USR1, USR2") != std::string::npos);
    }
    CHECK(error_of([] { parse_signal("KILL", "--stop-signal"); }).find("SIGKILL cannot be caught") !=
          std::string::npos);
  }
}

TEST_CASE("env::parse_signal_before") {
  auto s = parse_signal_before("USR2@5m", "--signal-before");
  REQUIRE(s);
  CHECK(s->signal == SIGUSR2);
  CHECK(s->before.count() == doctest::Approx(300));
  CHECK(sgpu::env::format_signal_before(*s) == "SIGUSR2@5m");
  CHECK(parse_signal_before("SIGTERM@90s", "x")->before.count() == doctest::Approx(90));
  CHECK(parse_signal_before("10@250ms", "x")->signal == 10);
  CHECK_FALSE(parse_signal_before("", "x"));
  CHECK_FALSE(parse_signal_before("none", "x"));
  SUBCASE("a bad value names the flag, the value and the form") {
    struct Row {
      const char* text;
      const char* says;
    };
    const Row rows[] = {
        {"USR2", "expected SIGNAL@DURATION, e.g. USR2@5m"},
        {"@5m", "expected SIGNAL@DURATION"},
        {"USR2@", "expected SIGNAL@DURATION"},
        {"NOPE@5m", "not a signal"},
        {"KILL@5m", "cannot be caught"},
        {"USR2@5x", "--signal-before"},
        {"USR2@none", "needs a length"},
    };
    for (const auto& row : rows) {
      CAPTURE(row.text);
      auto message = error_of([&] { parse_signal_before(row.text, "--signal-before"); });
      CHECK(message.starts_with("--signal-before "));
      CHECK(message.find(row.says) != std::string::npos);
    }
  }
}
