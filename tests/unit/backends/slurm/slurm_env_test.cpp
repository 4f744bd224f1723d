#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "backends/slurm/slurm_env.hpp"
#include "sgpu/env/error.hpp"

using sgpu::launcher::slurm::parse_gpu_ids;
using sgpu::launcher::slurm::parse_slurm_counts;
using Ints = std::vector<int>;

TEST_CASE("slurm::parse_slurm_counts") {
  struct Row {
    const char* text;
    Ints counts;
  };
  const Row rows[] = {
      {"1", {1}},
      {"8", {8}},
      {"2(x3),1", {2, 2, 2, 1}},
      {"4(x2)", {4, 4}},
      {"1,2,3", {1, 2, 3}},
      {"0", {0}},
      {"72(x2),36(x1),8", {72, 72, 36, 8}},
  };
  for (const auto& row : rows) {
    std::string text = row.text;
    CAPTURE(text);
    CHECK(parse_slurm_counts(row.text, "SLURM_TASKS_PER_NODE") == row.counts);
  }
  SUBCASE("malformed") {
    struct Bad {
      const char* text;
      const char* why;
    };
    const Bad bad[] = {
        {"", "it is empty at column 1"},
        {"x", "expected a number at column 1"},
        {"2(x3", "expected ')' at column 5"},
        {"2(x0)", "expected a repeat count above 0 at column 4"},
        {"2(x)", "expected a repeat count above 0 at column 4"},
        {"2(3)", "unexpected '(' at column 2"},
        {"2,", "expected a number at column 3"},
        {"-1", "expected a number at column 1"},
        {"1(x2000000)", "more than 1000000 nodes"},
        {"99999999999", "expected a number at column 1"},
    };
    for (const auto& row : bad) {
      std::string text = row.text;
      CAPTURE(text);
      std::string expected = std::string("SLURM_TASKS_PER_NODE: invalid value '") + row.text + "': " + row.why;
      CHECK_THROWS_WITH_AS(parse_slurm_counts(row.text, "SLURM_TASKS_PER_NODE"), doctest::Contains(expected.c_str()),
                           sgpu::Error);
    }
  }
}

TEST_CASE("slurm::parse_gpu_ids") {
  struct Row {
    const char* text;
    Ints ids;
  };
  const Row rows[] = {
      {"", {}},        {"0", {0}}, {"0,1,2", {0, 1, 2}}, {"0-3,6", {0, 1, 2, 3, 6}}, {"4,5,6,7", {4, 5, 6, 7}},
      {"3,1", {3, 1}},
  };
  for (const auto& row : rows) {
    std::string text = row.text;
    CAPTURE(text);
    CHECK(parse_gpu_ids(row.text, "SLURM_JOB_GPUS") == row.ids);
  }
  SUBCASE("malformed") {
    struct Bad {
      const char* text;
      const char* why;
    };
    const Bad bad[] = {
        {"a", "expected a GPU index at column 1"},       {"0,", "expected a GPU index at column 3"},
        {"3-1", "range 3-1 runs backwards at column 1"}, {"0-", "expected a GPU index at column 3"},
        {"0 1", "unexpected ' ' at column 2"},           {"GPU-8e3f", "expected a GPU index at column 1"},
    };
    for (const auto& row : bad) {
      std::string text = row.text;
      CAPTURE(text);
      std::string expected =
          std::string("SLURM_STEP_GPUS: invalid GPU ids '") + row.text + "': " + row.why + "; valid forms";
      CHECK_THROWS_WITH_AS(parse_gpu_ids(row.text, "SLURM_STEP_GPUS"), doctest::Contains(expected.c_str()),
                           sgpu::Error);
    }
  }
}
