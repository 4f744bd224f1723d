#include <doctest/doctest.h>

#include "sgpu/env/command.hpp"

using namespace sgpu::env;
using V = std::vector<std::string>;

TEST_CASE("env::build_argv") {
  using K = Entrypoint::Kind;
  struct Row {
    Entrypoint e;
    V argv;
  };
  const Row rows[] = {
      {{K::Script, "train.py", {"--epochs", "3"}}, {"/usr/bin/python3", "-u", "train.py", "--epochs", "3"}},
      {{K::Module, "pkg.train", {"-x"}}, {"/usr/bin/python3", "-u", "-m", "pkg.train", "-x"}},
      {{K::Executable, "/bin/echo", {"a b", "$(x)"}}, {"/bin/echo", "a b", "$(x)"}},
      {{K::Script, "t.py", {}}, {"/usr/bin/python3", "-u", "t.py"}},
      {{K::Script, "-dash.py", {"-v"}}, {"/usr/bin/python3", "-u", "./-dash.py", "-v"}},
      {{K::Executable, "-dash", {}}, {"-dash"}},
  };
  for (const auto& row : rows) CHECK(build_argv(row.e, "/usr/bin/python3") == row.argv);
}

TEST_CASE("env::unsupported_torchrun_option") {
  CHECK(unsupported_torchrun_option("--rdzv-backend").find("not supported by sgpu") != std::string::npos);
  CHECK(unsupported_torchrun_option("--rdzv_backend=c10d").find("--rdzv-backend") != std::string::npos);
  CHECK(unsupported_torchrun_option("--tee=3").find("--tee") != std::string::npos);
  CHECK(unsupported_torchrun_option("--epochs").empty());
  CHECK(unsupported_torchrun_option("train.py").empty());
}

TEST_CASE("env::shell_quote") {
  CHECK(shell_quote("plain-arg_1.py") == "plain-arg_1.py");
  CHECK(shell_quote("a b") == "'a b'");
  CHECK(shell_quote("it's") == "'it'\\''s'");
  CHECK(shell_quote("") == "''");
  CHECK(shell_join({"python3", "-c", "print(1)"}) == "python3 -c 'print(1)'");
}
