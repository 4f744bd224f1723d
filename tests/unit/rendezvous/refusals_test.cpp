#include <string>

#include <doctest/doctest.h>

#include "sgpu/rendezvous/refusals.hpp"

using sgpu::rendezvous::RefusalLog;

TEST_CASE("rendezvous::RefusalLog") {
  SUBCASE("nothing refused: nothing to say") {
    RefusalLog log;
    CHECK(log.total() == 0);
    CHECK(log.take_unsaid().empty());
    CHECK(log.describe().empty());
  }
  SUBCASE("the first of each reason is printed, the rest counted") {
    RefusalLog log;
    const char* secret = "it does not know the run's secret";
    CHECK(log.add("10.0.0.9", secret));
    CHECK_FALSE(log.add("10.0.0.9", secret));
    CHECK(log.add("10.0.0.7", "it speaks protocol version 99"));
    CHECK_FALSE(log.add("10.0.0.8", secret));
    CHECK(log.total() == 4);
    CHECK(log.take_unsaid() ==
          "2 more rendezvous peers were refused before authenticating, in all: "
          "it does not know the run's secret (3 times); it speaks protocol version 99 (once)");
    CHECK(log.take_unsaid().empty());  // said once
    CHECK(log.describe() ==
          "4 peers were refused (a node with another secret or sgpu version is refused, and never ends the wait): "
          "from 10.0.0.9, 10.0.0.8: it does not know the run's secret (3 times); "
          "from 10.0.0.7: it speaks protocol version 99 (once)");
  }
  SUBCASE("bounded: reasons past the first few and addresses past three are only counted") {
    RefusalLog log;
    int printed = 0;
    for (int v = 0; v < 100; ++v) printed += log.add("10.0.0.1", "it speaks protocol version " + std::to_string(v));
    CHECK(printed == 8);
    for (int h = 0; h < 100; ++h) log.add("10.0.1." + std::to_string(h), "it speaks protocol version 0");
    auto text = log.describe();
    CHECK(text.starts_with("200 peers were refused"));
    CHECK(text.find("from 10.0.0.1, 10.0.1.0, 10.0.1.1, ...: it speaks protocol version 0 (101 times)") !=
          std::string::npos);
    CHECK(text.ends_with("; 92 for other reasons"));
    CHECK(text.size() < 1000);
  }
}
