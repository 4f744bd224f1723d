#include <doctest/doctest.h>

#include <string>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"
#include "sgpu/launcher/spec/spec_load.hpp"

using namespace sgpu::launcher;
using namespace sgpu::launcher::preflight;

namespace {
JobSpec spec_of(const std::string& toml) { return resolve_spec({file_layer(toml, "job.toml")}).spec; }
}  // namespace

TEST_CASE("preflight::preflight_request: the [preflight] table") {
  SUBCASE("defaults: 8 B to 1 GiB by 2, 20 timed and 5 untimed, 3 minutes, the type's expectation") {
    auto r = preflight_request(spec_of("[preflight]\nenabled = true\n"));
    REQUIRE(r.sizes.size() == 28);
    CHECK(r.sizes.front() == 8);
    CHECK(r.sizes.back() == 1ULL << 30);
    CHECK(r.iters == 20);
    CHECK(r.warmup == 5);
    CHECK(r.timeout == std::chrono::minutes(3));
    CHECK_FALSE(r.expect_busbw.has_value());
  }
  SUBCASE("every key") {
    auto r = preflight_request(spec_of(
        "[preflight]\nenabled = true\nmax_bytes = \"64K\"\niters = 2\ntimeout = \"20s\"\nexpect_busbw = \"0.5\"\n"));
    CHECK(r.sizes.back() == 64 << 10);
    CHECK(r.sizes.size() == 14);
    CHECK(r.iters == 2);
    CHECK(r.warmup == 2);
    CHECK(r.timeout == std::chrono::seconds(20));
    CHECK(r.expect_busbw == doctest::Approx(0.5));
  }
}

TEST_CASE("preflight::preflight_request: bad values name the key, where it was set, and what is valid") {
  struct Row {
    const char* toml;
    const char* message;
  };
  const Row rows[] = {
      {"[preflight]\nmax_bytes = \"1T\"\n",
       "job.toml:2:13: preflight.max_bytes = \"1T\": not a size; write bytes as 8, 64K, 1M or 1G"},
      {"[preflight]\nmax_bytes = \"4\"\n", "the largest all-reduce must be at least 8 bytes"},
      {"[preflight]\ntimeout = \"none\"\n", "job.toml:2:11: preflight.timeout = \"none\": needs a limit"},
      {"[preflight]\nexpect_busbw = \"fast\"\n", "not a bandwidth; write GB/s as a positive number, e.g. 350 or 0.5"},
      {"[preflight]\nexpect_busbw = \"-3\"\n", "not a bandwidth"},
      {"[preflight]\nexpect_busbw = \"3x\"\n", "not a bandwidth"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.toml);
    std::string message;
    int code = 0;
    try {
      (void)preflight_request(spec_of(row.toml));
    } catch (const sgpu::Error& e) {
      message = e.what();
      code = e.exit_code();
    }
    CHECK(code == 2);
    CHECK_MESSAGE(message.find(row.message) != std::string::npos, message);
  }
}
