#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "sgpu/env/error.hpp"
#include "sgpu/env/rank_list.hpp"

using sgpu::env::parse_rank_list;

TEST_CASE("env::parse_rank_list") {
  struct Row {
    const char* text;
    std::vector<int> ranks;
  };
  const Row ok[] = {{"0", {0}}, {"0,3", {0, 3}}, {"0-3,7", {0, 1, 2, 3, 7}}, {"5-5", {5}}};
  for (const auto& row : ok) {
    CAPTURE(row.text);
    CHECK(parse_rank_list(row.text, "--ranks") == row.ranks);
  }
  for (const char* bad : {"", "a", "1,", ",1", "3-1", "-1", "1-", "1.5", "0-99999999"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(parse_rank_list(bad, "--ranks"), sgpu::Error);
  }
  try {
    parse_rank_list("0,x", "--ranks");
  } catch (const sgpu::Error& e) {
    CHECK(std::string(e.what()) == "--ranks 0,x: 'x' is not a rank; give ranks and ranges like 0,3 or 0-3,7");
  }
}
