#include <string>

#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"

using namespace sgpu::launcher;

TEST_CASE("launcher::expand_home") {
  const sgpu::env::Environment with_home = {{"HOME", "/home/u"}};
  struct Row {
    const char* path;
    const char* expanded;
  };
  const Row rows[] = {
      {"~", "/home/u"},
      {"~/x", "/home/u/x"},
      {"~/a b/c", "/home/u/a b/c"},
      {"/abs/~/x", "/abs/~/x"},
      {"rel/x", "rel/x"},
      {"~other/x", "~other/x"},
      {"", ""},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.path));
    CHECK(expand_home(row.path, with_home, "--log-dir") == row.expanded);
  }
  SUBCASE("without HOME, ~ is an error naming the option") {
    try {
      expand_home("~/x", {}, "--log-dir");
      FAIL("accepted");
    } catch (const sgpu::Error& e) {
      CHECK(std::string(e.what()) == "--log-dir ~/x: HOME is not set, so '~' means nothing; give an absolute path");
      CHECK(e.exit_code() == 2);
    }
    CHECK(expand_home("/abs", {}, "--log-dir") == "/abs");
  }
}

TEST_CASE("launcher::runs_root") {
  SUBCASE("the log dir given wins, with ~ expanded") {
    CHECK(runs_root("~/runs", {{"HOME", "/h"}, {"SGPU_HOME", "/s"}}) == "/h/runs");
  }
  SUBCASE("SGPU_HOME, then XDG_STATE_HOME, then HOME") {
    CHECK(runs_root("", {{"SGPU_HOME", "/s"}, {"XDG_STATE_HOME", "/x"}, {"HOME", "/h"}}) == "/s/runs");
    CHECK(runs_root("", {{"XDG_STATE_HOME", "/x"}, {"HOME", "/h"}}) == "/x/sgpu/runs");
    CHECK(runs_root("", {{"HOME", "/h"}}) == "/h/.local/state/sgpu/runs");
  }
}
