// What the runs directory makes of broken, full or crowded places: a
// state.json that cannot be believed, an end recorded only elsewhere,
// retention's bounded share of a launch.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/runs/registry.hpp"
#include "sgpu/launcher/runs/retire.hpp"
#include "sgpu/launcher/runs/run_state.hpp"

namespace fs = std::filesystem;
using namespace sgpu::launcher;
using json = nlohmann::json;

namespace {
json good_record() {
  return {{"version", 1},
          {"run_id", "x"},
          {"state", "succeeded"},
          {"host", "h"},
          {"sgpu_pid", 42},
          {"detached", false},
          {"started_at", "2026-12-03T00:00:01.000Z"},
          {"world_size", 2},
          {"nnodes", 1},
          {"entrypoint", "true"},
          {"exit_code", 0},
          {"duration_s", 1.5},
          {"ended_at", "2026-12-03T00:00:02.500Z"}};
}

struct TempRoot {
  fs::path path = fs::temp_directory_path() / ("sgpu-hostile-runs-" + std::to_string(::getpid()));
  TempRoot() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempRoot() { fs::remove_all(path); }
  void run(const std::string& id, const std::string& state_text) const {
    fs::create_directories(path / id);
    std::ofstream(path / id / "state.json") << state_text;
  }
};
}  // namespace

TEST_CASE("launcher::state_record_problem") {
  CHECK(state_record_problem(good_record()) == "");
  CHECK(state_record_problem(json::array()) == "not a JSON object");
  struct Row {
    const char* key;
    json value;  // null: the key is dropped
    const char* problem;
  };
  for (const auto& row : {
           Row{"state", nullptr, "'state' is missing"},
           Row{"state", "done", "'state' is \"done\", not one of"},
           Row{"started_at", nullptr, "'started_at' is missing"},
           Row{"started_at", "yesterday", "'started_at' is \"yesterday\", not a time"},
           Row{"world_size", nullptr, "'world_size' is missing"},
           Row{"world_size", 2147483648LL, "'world_size' is 2147483648, not 0..16777216"},
           Row{"world_size", 18446744073709551615ULL, "'world_size' is 18446744073709551615, not 0.."},
           Row{"world_size", -1, "'world_size' is -1, not 0.."},
           Row{"world_size", 2.5, "'world_size' is 2.5, not an integer"},
           Row{"world_size", "2", "'world_size' is \"2\", not an integer"},
           Row{"nnodes", 0, "'nnodes' is 0, not 1.."},
           Row{"sgpu_pid", -3, "'sgpu_pid' is -3"},
           Row{"exit_code", 256, "'exit_code' is 256, not 0..255"},
           Row{"detached", "yes", "'detached' is \"yes\", not true or false"},
           Row{"duration_s", -1, "'duration_s' is -1, not a number of seconds"},
           Row{"host", 5, "'host' is 5, not a string"},
       }) {
    CAPTURE(row.key);
    auto record = good_record();
    if (row.value.is_null())
      record.erase(row.key);
    else
      record[row.key] = row.value;
    CHECK(state_record_problem(record).starts_with(row.problem));
  }
  SUBCASE("optional fields may be absent or null") {
    auto record = good_record();
    for (const char* key : {"nnodes", "sgpu_pid", "exit_code", "duration_s", "ended_at", "host", "detached"})
      record.erase(key);
    record["exit_code"] = nullptr;
    CHECK(state_record_problem(record) == "");
  }
}

TEST_CASE("launcher::state_of_end_name") {
  CHECK(state_of_end_name("completed") == RunState::Succeeded);
  CHECK(state_of_end_name("rank_failed") == RunState::Failed);
  CHECK(state_of_end_name("timed_out") == RunState::TimedOut);
  CHECK(state_of_end_name("interrupted") == RunState::Cancelled);
  CHECK_FALSE(state_of_end_name("succeeded").has_value());
  CHECK_FALSE(state_of_end_name("").has_value());
}

TEST_CASE("launcher::kept_span") {
  auto every = [](std::size_t) { return true; };
  CHECK(kept_span(5, 2, every) == 2);
  CHECK(kept_span(5, 0, every) == 0);
  CHECK(kept_span(1, 2, every) == 1);
  // Directories without a state.json (starting) neither count nor go.
  std::vector<bool> is_run = {false, true, false, true, true};
  CHECK(kept_span(5, 2, [&](std::size_t i) { return is_run[i]; }) == 4);
}

TEST_CASE("launcher::read_run: an unreadable state.json is a run in state unknown, never hidden") {
  TempRoot root;
  auto record = good_record();
  root.run("20261203-000002-000002", record.dump());
  record["world_size"] = 1LL << 40;
  root.run("20261203-000003-000003", record.dump());
  root.run("20261203-000004-000004", "{\"state\": ");
  auto runs = list_runs(root.path.string());
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].state == RunState::Unknown);
  CHECK(runs[0].problem == (root.path / "20261203-000004-000004/state.json").string() + ": not valid JSON");
  CHECK(runs[1].state == RunState::Unknown);
  CHECK(runs[1].problem.find("'world_size' is 1099511627776") != std::string::npos);
  CHECK(runs[1].world_size == 0);
  CHECK(run_json(runs[1])["problem"] == runs[1].problem);
  CHECK(runs[2].state == RunState::Succeeded);
  CHECK(runs[2].problem.empty());
  CHECK_FALSE(run_json(runs[2]).contains("problem"));
  CHECK(find_run(root.path.string(), "last").id == "20261203-000004-000004");
}

TEST_CASE("launcher::read_run: a run whose sgpu is gone ended as events.jsonl or summary.json recorded") {
  TempRoot root;
  auto record = good_record();
  record["state"] = "running";
  record.erase("exit_code");
  record.erase("ended_at");
  record.erase("duration_s");
  root.run("20261203-000001-000001", record.dump());
  SUBCASE("nothing recorded: lost, for an unknown time") {
    auto run = read_run(root.path.string(), "20261203-000001-000001");
    CHECK(run->state == RunState::Lost);
    CHECK(run->problem.empty());
    CHECK_FALSE(run_duration_s(*run).has_value());
    CHECK(run_json(*run)["duration_s"].is_null());
  }
  SUBCASE("events.jsonl's run_finished") {
    std::ofstream(root.path / "20261203-000001-000001/events.jsonl")
        << "{\"event\":\"run_started\"}\n{\"event\":\"run_finished\",\"status\":\"rank_failed\",\"exit_code\":3,"
           "\"duration_s\":2.0}\n";
    auto run = read_run(root.path.string(), "20261203-000001-000001");
    CHECK(run->state == RunState::Failed);
    CHECK(run->exit_code == 3);
    CHECK(run_duration_s(*run) == doctest::Approx(2.0));
    CHECK(run->problem.find("the end is from events.jsonl") != std::string::npos);
  }
  SUBCASE("summary.json") {
    std::ofstream(root.path / "20261203-000001-000001/summary.json") << "{\"status\":\"completed\",\"exit_code\":0}";
    auto run = read_run(root.path.string(), "20261203-000001-000001");
    CHECK(run->state == RunState::Succeeded);
    CHECK(run->exit_code == 0);
    CHECK(run->problem.find("the end is from summary.json") != std::string::npos);
  }
}

TEST_CASE("launcher::retire_runs renames a bounded number of the oldest finished runs into the trash") {
  TempRoot root;
  for (int i = 1; i <= 6; ++i) root.run(fmt::format("20261203-00000{}-00000{}", i, i), good_record().dump());
  fs::create_directories(root.path / "20261203-000000-starting");  // no state.json: stays
  auto first = retire_runs(root.path.string(), 2, 3);
  CHECK(first.retired == 3);
  CHECK(first.more);
  CHECK(first.errors.empty());
  CHECK(trash_size(root.path.string()) == 3);
  CHECK(fs::exists(root.path / ".trash/20261203-000001-000001"));
  CHECK(fs::exists(root.path / "20261203-000004-000004"));
  CHECK(run_ids(root.path.string()).size() == 4);  // the trash is no run
  // Junk a launch moved out of the directory it took counts once a launch.
  for (const char* junk : {".old-20261203-000007-000007-0", ".old-20261203-000007-000007-1"})
    std::ofstream(root.path / ".trash" / junk) << "old";
  CHECK(trash_size(root.path.string()) == 4);
  // The deleter spares the newest retired run, for the next launch to take.
  CHECK(empty_trash(root.path.string(), 2, true).empty());
  CHECK(trash_size(root.path.string()) == 1);
  std::vector<std::string> trash;
  for (const auto& e : fs::directory_iterator(root.path / ".trash")) trash.push_back(e.path().filename().string());
  CHECK(trash == std::vector<std::string>{"20261203-000004-000004"});
  CHECK(empty_trash(root.path.string(), 2).empty());  // sgpu prune: all of it
  CHECK(trash_size(root.path.string()) == 0);
  auto left = run_ids(root.path.string());
  CHECK(left ==
        std::vector<std::string>{"20261203-000006-000006", "20261203-000005-000005", "20261203-000000-starting"});
  CHECK_FALSE(retire_runs(root.path.string(), 2, 3).more);
}

TEST_CASE("launcher::retire_runs orders a second's runs by when each started, recycled directories too") {
  // Two runs of one second at the boundary of `keep`: the one that started
  // later stays, whatever their ids' random parts or their directories'
  // birth times say. The lock's mtime (set as a recycled directory is taken)
  // says when each started. Their directories are born now, in order a then
  // b: after their ids' second (ids of a second ago), or before it (ids of
  // ten seconds on), as a directory recycled from an older run is.
  for (long offset : {-1L, 10L}) {
    CAPTURE(offset);
    auto at_second = std::time(nullptr) + offset;
    auto second = run_id_second(at_second);
    struct Row {
      long a_started_ms;  // after the second's start
      long b_started_ms;
      const char* kept;
    };
    for (const auto& row : {Row{200, 100, "aaaaaa"}, Row{100, 200, "bbbbbb"}}) {
      CAPTURE(row.kept);
      TempRoot root;
      for (const auto& [suffix, ms] : {std::pair{"aaaaaa", row.a_started_ms}, std::pair{"bbbbbb", row.b_started_ms}}) {
        auto id = second + "-" + suffix;
        root.run(id, good_record().dump());
        std::ofstream(root.path / id / "lock").flush();
        const timespec at[2] = {{at_second, ms * 1000000}, {at_second, ms * 1000000}};
        REQUIRE(::utimensat(AT_FDCWD, (root.path / id / "lock").c_str(), at, 0) == 0);
      }
      auto out = retire_runs(root.path.string(), 1, 8);
      CHECK(out.retired == 1);
      CHECK(run_ids(root.path.string()) == std::vector<std::string>{second + "-" + row.kept});
    }
  }
}
