#include <string_view>

#include <doctest/doctest.h>

#include "backends/ssh/remote_env.hpp"
#include "sgpu/env/error.hpp"

using namespace sgpu::launcher::ssh;
using sgpu::env::Environment;

TEST_CASE("ssh::forwarded_by_default") {
  struct Row {
    const char* name;
    bool forwarded;
  };
  const Row rows[] = {
      {"PATH", true},
      {"LD_LIBRARY_PATH", true},
      {"PYTHONPATH", true},
      {"VIRTUAL_ENV", true},
      {"CUDA_HOME", true},
      {"NCCL_DEBUG", true},
      {"MLFLOW_TRACKING_URI", true},
      {"HF_HOME", true},
      {"HF_TOKEN", true},
      {"CUDA_VISIBLE_DEVICES", false},  // each node picks its own GPUs
      {"HOME", false},
      {"USER", false},
      {"SSH_AUTH_SOCK", false},
      {"PATHS", false},
      {"MY_PATH", false},
      {"HFX", false},
      {"OMP_NUM_THREADS", false},
      {"LANG", false},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.name));
    CHECK(forwarded_by_default(row.name) == row.forwarded);
  }
}

TEST_CASE("ssh::remote_environment: allowlist < [env] < --env-file < -x") {
  Environment here{{"PATH", "/here/bin"},         {"HOME", "/root"},  {"NCCL_DEBUG", "INFO"},
                   {"CUDA_VISIBLE_DEVICES", "0"}, {"WANDB_KEY", "k"}, {"A", "from-here"}};
  RemoteEnvSources s;
  s.spec_env = {{"A", "spec"}, {"B", "spec"}, {"C", "spec"}};
  s.env_files = {parse_env_file("B=file\n", "f", here)};
  s.x_flags = {"C=flag", "WANDB_KEY", "EMPTY="};
  Environment expected{{"PATH", "/here/bin"}, {"NCCL_DEBUG", "INFO"}, {"A", "spec"}, {"B", "file"},
                       {"C", "flag"},         {"WANDB_KEY", "k"},     {"EMPTY", ""}};
  CHECK(remote_environment(here, s) == expected);
}

TEST_CASE("ssh::parse_env_file") {
  Environment here{{"TOKEN", "t0k"}};
  auto env = parse_env_file(
      "# comment\n\nA=1\nexport B=two words\nC=\"quoted # not a comment\"\nD='single'\nE=\nF=a=b\n  TOKEN  \n"
      "G=\"unbalanced\n",
      "vars.env", here);
  Environment expected{
      {"A", "1"},       {"B", "two words"},   {"C", "quoted # not a comment"}, {"D", "single"}, {"E", ""}, {"F", "a=b"},
      {"TOKEN", "t0k"}, {"G", "\"unbalanced"}};
  CHECK(env == expected);
  struct Row {
    const char* text;
    const char* message;
  };
  const Row rows[] = {
      {"A=1\n1X=2\n", "--env-file vars.env:2 '1X=2': '1X' is not a variable name"},
      {"A=1\n\nMISSING\n", "--env-file vars.env:3 MISSING: MISSING is not set here"},
      {"=x\n", "--env-file vars.env:1 '=x': '' is not a variable name"},
      {"A-B=1\n", "'A-B' is not a variable name"},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.text));
    CHECK_THROWS_WITH_AS(parse_env_file(row.text, "vars.env", here), doctest::Contains(row.message), sgpu::Error);
  }
  using namespace std::string_view_literals;
  CHECK_THROWS_WITH_AS(parse_env_file("A=1\nB=abc\0xyz\n"sv, "vars.env", here),
                       doctest::Contains("--env-file vars.env:2: holds a NUL byte"), sgpu::Error);
  CHECK_THROWS_WITH_AS(parse_env_assignment("NOPE", here, "-x"), doctest::Contains("-x NOPE: NOPE is not set here"),
                       sgpu::Error);
}
