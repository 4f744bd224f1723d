#include <doctest/doctest.h>

#include <string>

#include "sgpu/env/run_name.hpp"

using namespace sgpu::env;

TEST_CASE("env::run_name_problem") {
  struct Row {
    std::string name;
    const char* problem;  // a part of the message; nullptr: valid
  };
  const Row rows[] = {
      {"nightly", nullptr},
      {"bert-large_v2.1", nullptr},
      {"A", nullptr},
      {std::string(64, 'a'), nullptr},
      {"", "the name is empty"},
      {std::string(65, 'a'), "the name is 65 characters long"},
      {"20261202-115301-3fa2c1", "starts with '2'"},  // a run id: never a name
      {"2026", "starts with '2'"},                    // an id's prefix
      {"-x", "starts with '-'"},
      {".hidden", "starts with '.'"},
      {"last", "'last' already means the newest run"},
      {"my run", "character 3 (byte 0x20) is not allowed"},
      {"a/b", "character 2 ('/') is not allowed"},
      {"tab\there", "character 4 (byte 0x09) is not allowed"},
      {"caf\xc3\xa9", "character 4 (byte 0xc3) is not allowed"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    auto problem = run_name_problem(row.name);
    if (row.problem == nullptr) {
      CHECK(problem.empty());
      continue;
    }
    CHECK(problem.find(row.problem) != std::string::npos);
    CHECK(problem.find("a name starts with a letter") != std::string::npos);  // and what is valid
  }
}

TEST_CASE("env::idempotency_key_problem") {
  struct Row {
    std::string key;
    const char* problem;
  };
  const Row rows[] = {
      {"12345", nullptr},  // GitLab's CI_JOB_ID: digits are fine, a key is never a RUN
      {"gh-8812345-2", nullptr},
      {"pipeline/12/job:3@main+x=1", nullptr},
      {std::string(128, 'k'), nullptr},
      {"", "the key is empty"},
      {std::string(129, 'k'), "the key is 129 characters long"},
      {"a b", "character 2 (byte 0x20) is not allowed"},
      {"key\"", "character 4 ('\"') is not allowed"},
      {"x\ny", "character 2 (byte 0x0a) is not allowed"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.key);
    auto problem = idempotency_key_problem(row.key);
    if (row.problem == nullptr) {
      CHECK(problem.empty());
      continue;
    }
    CHECK(problem.find(row.problem) != std::string::npos);
    CHECK(problem.find("a key is 1 to 128") != std::string::npos);
  }
}

TEST_CASE("env::is_run_name_query: names and ids never overlap") {
  struct Row {
    const char* query;
    bool name;
  };
  for (auto [query, name] :
       {Row{"nightly", true}, Row{"Bert", true}, Row{"last", false}, Row{"lastly", true},
        Row{"20261202-115301-3fa2c1", false}, Row{"2026", false}, Row{"", false}, Row{"-x", false}}) {
    const std::string asked = query;  // clang 14 cannot capture a structured binding
    CAPTURE(asked);
    CHECK(is_run_name_query(query) == name);
    // Every valid name is read as a name.
    if (run_name_problem(query).empty()) CHECK(is_run_name_query(query));
  }
}
