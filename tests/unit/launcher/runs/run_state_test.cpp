#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/outputs/run_state_file.hpp"
#include "sgpu/launcher/runs/registry.hpp"
#include "sgpu/launcher/runs/run_state.hpp"

namespace fs = std::filesystem;
using namespace sgpu::launcher;
using Kind = sgpu::env::JobEnd::Kind;
using std::chrono::hours;
using std::chrono::seconds;
using TimePoint = std::chrono::system_clock::time_point;

TEST_CASE("launcher::run_state_name and parse_run_state") {
  for (auto s : {RunState::Running, RunState::Succeeded, RunState::Failed, RunState::TimedOut, RunState::Cancelled,
                 RunState::Lost}) {
    CAPTURE(run_state_name(s));
    CHECK(parse_run_state(run_state_name(s)) == s);
  }
  CHECK(run_state_name(RunState::TimedOut) == "timed-out");
  CHECK_FALSE(parse_run_state("timed_out").has_value());
  CHECK_FALSE(parse_run_state("").has_value());
}

TEST_CASE("launcher::final_state") {
  struct Row {
    Kind kind;
    RunState state;
  };
  for (auto [kind, state] : {Row{Kind::Completed, RunState::Succeeded}, Row{Kind::RankFailed, RunState::Failed},
                             Row{Kind::SpawnFailed, RunState::Failed}, Row{Kind::NodeLost, RunState::Failed},
                             Row{Kind::TimedOut, RunState::TimedOut}, Row{Kind::Interrupted, RunState::Cancelled}}) {
    const int kind_number = static_cast<int>(kind);  // clang 14 cannot capture a structured binding
    CAPTURE(kind_number);
    CHECK(final_state(kind) == state);
  }
}

TEST_CASE("launcher::observed_state") {
  SUBCASE("running with its lock held is running") {
    CHECK(observed_state(RunState::Running, true) == RunState::Running);
  }
  SUBCASE("running without a lock holder is lost") {
    CHECK(observed_state(RunState::Running, false) == RunState::Lost);
  }
  SUBCASE("a recorded end stands, lock or not (the supervisor is about to exit)") {
    CHECK(observed_state(RunState::Failed, true) == RunState::Failed);
    CHECK(observed_state(RunState::Succeeded, false) == RunState::Succeeded);
  }
}

TEST_CASE("launcher::resolve_run_id") {
  std::vector<std::string> ids = {"20261203-091502-aa0001", "20261203-091501-bb0002", "20261203-091501-bb1003",
                                  "20261202-080000-cc0004"};
  SUBCASE("a full id") { CHECK(resolve_run_id(ids, "20261203-091501-bb0002", "/r") == "20261203-091501-bb0002"); }
  SUBCASE("last is the newest") { CHECK(resolve_run_id(ids, "last", "/r") == "20261203-091502-aa0001"); }
  SUBCASE("a unique prefix") { CHECK(resolve_run_id(ids, "20261202", "/r") == "20261202-080000-cc0004"); }
  SUBCASE("an ambiguous prefix lists the candidates") {
    try {
      resolve_run_id(ids, "20261203-091501", "/r");
      FAIL("no error");
    } catch (const sgpu::Error& e) {
      std::string what = e.what();
      CHECK(what.find("matches 2 runs") != std::string::npos);
      CHECK(what.find("20261203-091501-bb0002") != std::string::npos);
      CHECK(what.find("20261203-091501-bb1003") != std::string::npos);
      CHECK(what.find("aa0001") == std::string::npos);
      CHECK(e.exit_code() == sgpu::kExitUsage);
    }
  }
  SUBCASE("no match names the runs directory") {
    CHECK_THROWS_WITH_AS(resolve_run_id(ids, "2027", "/r"), doctest::Contains("no run '2027' in /r"), sgpu::Error);
  }
  SUBCASE("no runs at all") {
    CHECK_THROWS_WITH_AS(resolve_run_id({}, "last", "/r"), doctest::Contains("no runs in /r"), sgpu::Error);
  }
}

TEST_CASE("launcher::select_prune") {
  TimePoint now{hours(1000)};
  auto ago = [&](int h) { return now - hours(h); };
  // newest first: a running run, then finished ones ending 1, 2, 30 and 200 hours ago
  std::vector<PruneCandidate> runs = {
      {"e", false, ago(0)}, {"d", true, ago(1)}, {"c", true, ago(2)}, {"b", true, ago(30)}, {"a", true, ago(200)}};
  using V = std::vector<std::string>;
  auto keep = [](int n) { return PruneRule{.keep = n, .older_than = std::nullopt}; };
  auto older = [](seconds d) { return PruneRule{.keep = std::nullopt, .older_than = d}; };
  SUBCASE("keep N counts running runs and never removes one") {
    CHECK(select_prune(runs, keep(2), now) == V{"c", "b", "a"});
    CHECK(select_prune(runs, keep(0), now) == V{"d", "c", "b", "a"});
    CHECK(select_prune(runs, keep(10), now).empty());
  }
  SUBCASE("older than D") { CHECK(select_prune(runs, older(hours(24)), now) == V{"b", "a"}); }
  SUBCASE("both must agree to remove") {
    CHECK(select_prune(runs, {.keep = 4, .older_than = seconds(hours(1))}, now) == V{"a"});
  }
  SUBCASE("a running run stays even when old and beyond keep") {
    std::vector<PruneCandidate> old_running = {{"x", true, ago(1)}, {"y", false, ago(500)}};
    CHECK(select_prune(old_running, {.keep = 0, .older_than = seconds(1)}, now) == V{"x"});
  }
}

TEST_CASE("launcher::parse_iso_time") {
  auto t = parse_iso_time("2026-12-02T11:53:01.042Z");
  REQUIRE(t.has_value());
  CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(t->time_since_epoch()).count() == 1796212381042LL);
  CHECK(parse_iso_time("2026-12-02T11:53:01Z").has_value());
  for (auto bad : {"", "2026-12-02 11:53:01Z", "2026-12-02T11:53:01.042", "2026-13-02T11:53:01Z", "x"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_iso_time(bad).has_value());
  }
}

TEST_CASE("launcher::RunStateFile and read_run: running while locked, lost when the lock goes without an end") {
  auto root = fs::temp_directory_path() / ("sgpu-runs-test-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "20261203-000001-000001");
  fs::create_directories(root / "20261203-000002-000002");
  fs::create_directories(root / "20261203-000003-000003");  // no state.json: still starting, not listed
  auto record = [](const char* id) {
    return nlohmann::ordered_json{{"run_id", id}, {"started_at", "2026-12-03T00:00:01.000Z"}, {"world_size", 2}};
  };
  {
    RunStateFile lost((root / "20261203-000001-000001").string(), record("20261203-000001-000001"));
    RunStateFile done((root / "20261203-000002-000002").string(), record("20261203-000002-000002"));
    auto running = read_run(root.string(), "20261203-000001-000001");
    REQUIRE(running.has_value());
    CHECK(running->state == RunState::Running);
    CHECK(run_lock_held(running->dir));
    done.finish(RunState::TimedOut, 124, TimePoint{}, TimePoint{seconds(3)}, 3.0);
  }
  auto runs = list_runs(root.string());
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].id == "20261203-000002-000002");
  CHECK(runs[0].state == RunState::TimedOut);
  CHECK(runs[0].exit_code == 124);
  CHECK(runs[1].state == RunState::Lost);
  CHECK_FALSE(runs[1].exit_code.has_value());
  CHECK(list_runs(root.string(), 1).size() == 1);
  fs::remove_all(root);
}
