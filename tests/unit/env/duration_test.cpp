#include <string>

#include <doctest/doctest.h>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/error.hpp"

using sgpu::env::format_duration;
using sgpu::env::parse_duration;
using sgpu::env::Seconds;

TEST_CASE("env::parse_duration") {
  struct Row {
    const char* text;
    double seconds;
  };
  const Row rows[] = {
      {"3600", 3600}, {"90s", 90},     {"90m", 5400}, {"2h30m", 9000}, {"1h5m10s", 3910},
      {"1.5h", 5400}, {"250ms", 0.25}, {"1d", 86400}, {"3h", 10800},   {"10min", 600},
  };
  for (const auto& row : rows) {
    CAPTURE(row.text);
    auto d = parse_duration(row.text, "--timeout");
    REQUIRE(d.has_value());
    CHECK(d->count() == doctest::Approx(row.seconds));
  }
  SUBCASE("a limit up to 365 days is accepted") {
    CHECK(parse_duration("365d", "--timeout")->count() == doctest::Approx(365.0 * 86400));
    CHECK(parse_duration("8760h", "--grace")->count() == doctest::Approx(365.0 * 86400));
  }
  SUBCASE("a limit beyond 365 days is refused, not wrapped to a negative timer") {
    const char* huge[] = {"99999999999", "3000000h", "366d", "8760h1s",
                          "99999999999999999999999999999999999999999999999999999999999999999999999999999999"};
    for (const char* text : huge) {
      CAPTURE(text);
      try {
        parse_duration(text, "--timeout");
        FAIL("accepted");
      } catch (const sgpu::Error& e) {
        CHECK(std::string(e.what()).find("too large (at most 365d)") != std::string::npos);
        CHECK(e.exit_code() == 2);
      }
    }
  }
  SUBCASE("none means no limit, and is its only spelling") {
    CHECK_FALSE(parse_duration("none", "--timeout").has_value());
    CHECK_THROWS_AS(parse_duration("inf", "--timeout"), sgpu::Error);
    CHECK_THROWS_AS(parse_duration("infinity", "--timeout"), sgpu::Error);
  }
  SUBCASE("what is refused, and why") {
    struct Refused {
      const char* text;
      bool none_ok;
      const char* why;
    };
    const Refused refused[] = {
        {"2h30m30m", true, "'m' is given twice"},
        {"1s1sec", true, "'sec' is given twice"},
        {"1m1min", true, "'min' is given twice"},
        {"30m2h", true, "units go from the largest to the smallest (d, h, m, s, ms)"},
        {"5ms1s", true, "units go from the largest to the smallest"},
        {"0.0000000001", true, "it is under 1ms, the shortest duration sgpu counts"},
        {"0.5ms", true, "it is under 1ms"},
        {"0", true,
         "it must be greater than zero (use 'none' for no limit); valid forms: 3600, 90s, 90m, 2h30m, "
         "1.5h, none"},
        {"0", false, "it must be greater than zero; valid forms: 3600, 90s, 90m, 2h30m, 1.5h"},
        {"0s", false, "it must be greater than zero; valid forms: 3600, 90s, 90m, 2h30m, 1.5h"},
        {"abc", false, "valid forms: 3600, 90s, 90m, 2h30m, 1.5h"},
    };
    for (const auto& row : refused) {
      CAPTURE(row.text);
      CAPTURE(row.none_ok);
      try {
        parse_duration(row.text, "--grace", row.none_ok);
        FAIL("accepted");
      } catch (const sgpu::Error& e) {
        std::string msg = e.what();
        CHECK(msg.find(std::string("--grace: invalid duration '") + row.text + "': ") == 0);
        CHECK(msg.find(row.why) != std::string::npos);
        CHECK((msg.find("none") == std::string::npos) == !row.none_ok);
        CHECK(e.exit_code() == 2);
      }
    }
  }
  SUBCASE("units in order, each once, are summed") {
    CHECK(parse_duration("1d2h3m4s5ms", "--timeout")->count() == doctest::Approx(86400 + 7200 + 180 + 4.005));
    CHECK(parse_duration("1ms", "--timeout")->count() == doctest::Approx(0.001));
  }
  SUBCASE("bad input names the flag, the text and the valid forms") {
    const char* bad[] = {"", "abc", "10x", "-5", "0", "5m3", "h", "1..5s"};
    for (const char* text : bad) {
      CAPTURE(text);
      try {
        parse_duration(text, "--timeout");
        FAIL("accepted");
      } catch (const sgpu::Error& e) {
        std::string msg = e.what();
        CHECK(msg.find("--timeout") != std::string::npos);
        CHECK(msg.find("valid forms") != std::string::npos);
        CHECK(e.exit_code() == 2);
      }
    }
  }
}

TEST_CASE("env::format_duration") {
  struct Row {
    double seconds;
    const char* shown;
  };
  const Row rows[] = {
      {10800, "3h"},      {5400, "1h30m"}, {61, "1m1s"},    {2.5, "2.5s"},      {0.25, "250ms"},
      {7, "7s"},          {0.001, "1ms"},  {0.0015, "2ms"}, {0.0025, "3ms"},    {0.9994, "999ms"},
      {0.9996, "1000ms"}, {1.04, "1s"},    {1.05, "1.1s"},  {59.94, "59.9s"},   {59.96, "60s"},
      {60.4, "1m"},       {60.5, "1m1s"},  {3599.5, "1h"},  {90061, "25h1m1s"}, {365.0 * 86400, "8760h"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.seconds);
    CHECK(format_duration(Seconds(row.seconds)) == row.shown);
  }
}

TEST_CASE("env::Duration keeps the value and the user's spelling") {
  using sgpu::env::Duration;
  struct Case {
    const char* text;
    double seconds;  // < 0: none
  };
  for (const auto& c : {Case{"90m", 5400}, Case{"3600", 3600}, Case{"1.5h", 5400}, Case{"none", -1}}) {
    CAPTURE(c.text);
    Duration d(c.text, "--timeout");
    CHECK(d.text() == c.text);  // "90m" stays "90m" where the spec is shown or sent
    if (c.seconds < 0) {
      CHECK_FALSE(d.limit());
      try {
        (void)d.required("--join-timeout none (set in job.toml)");
        FAIL("no limit was accepted as one");
      } catch (const sgpu::Error& e) {
        CHECK(std::string(e.what()) == "--join-timeout none (set in job.toml): give a limit, e.g. 10s");
      }
    } else {
      CHECK(d.limit()->count() == c.seconds);
      CHECK(d.required("--timeout").count() == c.seconds);
    }
  }
  // Parsed where it is set: a wrong one never reaches the job.
  CHECK_THROWS_WITH_AS(
      Duration("90x", "--grace", false),
      "--grace: invalid duration '90x': unknown unit 'x' (use ms, s, m, h, d); valid forms: 3600, 90s, "
      "90m, 2h30m, 1.5h",
      sgpu::Error);
  Duration built_in = "30s";
  CHECK(built_in.limit()->count() == 30);
}
