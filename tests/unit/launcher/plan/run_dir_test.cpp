#include <pwd.h>
#include <unistd.h>
#include <string>

#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"

using namespace sgpu::launcher;

namespace {
std::optional<std::string> fake_users(const std::string& user) {
  if (user == "other") return "/home/other";
  if (user == "svc.x-1") return "/srv/svc";
  return std::nullopt;
}
}  // namespace

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
      {"rel/~other/x", "rel/~other/x"},
      {"~other/x", "/home/other/x"},
      {"~other", "/home/other"},
      {"~other/", "/home/other/"},
      {"~svc.x-1/runs", "/srv/svc/runs"},
      {"", ""},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.path));
    CHECK(expand_home(row.path, with_home, "--log-dir", fake_users) == row.expanded);
  }
  SUBCASE("~user of no user is an error naming the option and the user") {
    try {
      expand_home("~nobody-here/x", with_home, "--log-dir", fake_users);
      FAIL("accepted");
    } catch (const sgpu::Error& e) {
      CHECK(std::string(e.what()) ==
            "--log-dir ~nobody-here/x: there is no user 'nobody-here' on this host, so '~nobody-here' means nothing; "
            "give an absolute path");
      CHECK(e.exit_code() == 2);
    }
  }
  SUBCASE("the user database answers for this process's user") {
    const passwd* me = ::getpwuid(::geteuid());
    REQUIRE(me != nullptr);
    CHECK(passwd_home(me->pw_name) == std::optional<std::string>(me->pw_dir));
    CHECK_FALSE(passwd_home("no-such-user-sgpu-test").has_value());
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
  SUBCASE("a ~ in SGPU_HOME is the home, as in --log-dir") {
    CHECK(runs_root("", {{"SGPU_HOME", "~/sgpu"}, {"HOME", "/h"}}) == "/h/sgpu/runs");
    CHECK_THROWS_WITH_AS(runs_root("", {{"SGPU_HOME", "~/sgpu"}}),
                         doctest::Contains("SGPU_HOME ~/sgpu: HOME is not set"), sgpu::Error);
  }
  SUBCASE("SGPU_HOME, then XDG_STATE_HOME, then HOME") {
    CHECK(runs_root("", {{"SGPU_HOME", "/s"}, {"XDG_STATE_HOME", "/x"}, {"HOME", "/h"}}) == "/s/runs");
    CHECK(runs_root("", {{"XDG_STATE_HOME", "/x"}, {"HOME", "/h"}}) == "/x/sgpu/runs");
    CHECK(runs_root("", {{"HOME", "/h"}}) == "/h/.local/state/sgpu/runs");
  }
}
