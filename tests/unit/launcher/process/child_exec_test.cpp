#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "process/child_exec.hpp"

using sgpu::env::Environment;
using sgpu::launcher::ExecEnvironment;

namespace {
std::vector<std::string> entries(const ExecEnvironment& env) {
  std::vector<std::string> out;
  for (auto* p = env.envp(); *p != nullptr; ++p) out.emplace_back(*p);
  return out;
}
}  // namespace

TEST_CASE("launcher::ExecEnvironment: NAME=value strings for exec, the overrides winning") {
  struct Row {
    Environment env;
    Environment overrides;
    std::vector<std::string> expected;
  };
  for (const auto& row : std::vector<Row>{
           {{}, {}, {}},
           {{{"A", "1"}, {"B", ""}}, {}, {"A=1", "B="}},
           {{{"A", "1"}, {"DEADLINE", "old"}}, {{"DEADLINE", "17"}}, {"A=1", "DEADLINE=17"}},
           {{}, {{"X", "a=b"}}, {"X=a=b"}},
           {{{"LONG", std::string(300, 'v')}}, {}, {"LONG=" + std::string(300, 'v')}},
       }) {
    ExecEnvironment exec(row.env, row.overrides);
    CHECK(entries(exec) == row.expected);
  }
}
