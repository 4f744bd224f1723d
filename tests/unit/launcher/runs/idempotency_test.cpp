#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "sgpu/launcher/runs/idempotency.hpp"

namespace fs = std::filesystem;
using namespace sgpu::launcher;
using json = nlohmann::json;

TEST_CASE("launcher::key_action") {
  struct Row {
    std::optional<RunState> newest;
    KeyAction action;
  };
  for (auto [newest, action] : {Row{std::nullopt, KeyAction::Start}, Row{RunState::Running, KeyAction::Follow},
                                Row{RunState::Succeeded, KeyAction::Reuse}, Row{RunState::Failed, KeyAction::Start},
                                Row{RunState::TimedOut, KeyAction::Start}, Row{RunState::Cancelled, KeyAction::Start},
                                Row{RunState::Lost, KeyAction::Start}, Row{RunState::Unknown, KeyAction::Refuse}}) {
    // A copy: clang 14 cannot capture a structured binding in CAPTURE's lambda.
    const std::string_view newest_state = newest ? run_state_name(*newest) : "none";
    CAPTURE(newest_state);
    CHECK(key_action(newest) == action);
  }
}

namespace {
JobSpec train_spec() {
  JobSpec s;
  s.entrypoint = {sgpu::env::Entrypoint::Kind::Script, "train.py", {"--lr", "0.1"}};
  s.nproc = 2;
  return s;
}

// spec.json as a run with `s` recorded it (the fields the comparison reads).
json recorded(const JobSpec& s) { return json::parse(work_identity(s).dump()); }
}  // namespace

TEST_CASE("launcher::work_differences") {
  auto base = train_spec();
  struct Row {
    const char* what;
    void (*change)(JobSpec&);
    std::vector<std::string> differences;
  };
  const Row rows[] = {
      {"the same work", [](JobSpec&) {}, {}},
      {"a name or a timeout is not the work",
       [](JobSpec& s) {
         s.name = "other";
         s.timeout = "1m";
       },
       {}},
      {"another script",
       [](JobSpec& s) { s.entrypoint.target = "eval.py"; },
       {"entrypoint: train.py before, eval.py now"}},
      {"a module of the same name",
       [](JobSpec& s) { s.entrypoint.kind = sgpu::env::Entrypoint::Kind::Module; },
       {"entrypoint: train.py before, -m train.py now"}},
      {"other arguments",
       [](JobSpec& s) {
         s.entrypoint.args = {"--lr", "0.2 x"};
       },
       {"arguments: --lr 0.1 before, --lr '0.2 x' now"}},
      {"no arguments", [](JobSpec& s) { s.entrypoint.args.clear(); }, {"arguments: --lr 0.1 before, (none) now"}},
      {"more ranks", [](JobSpec& s) { s.nproc = 4; }, {"resources.nproc: 2 before, 4 now"}},
      {"GPUs instead of CPU ranks",
       [](JobSpec& s) {
         s.nproc.reset();
         s.gpus = 8;
       },
       {"resources.gpus: unset before, 8 now", "resources.nproc: 2 before, unset now"}},
      {"another backend and node count",
       [](JobSpec& s) {
         s.backend = "ssh";
         s.nodes = 2;
       },
       {"resources.backend: local before, ssh now", "resources.nodes: 1 before, 2 now"}},
      {"a GPU type", [](JobSpec& s) { s.gpu_type = "H100"; }, {"resources.gpu_type: unset before, H100 now"}},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    auto now = base;
    row.change(now);
    CHECK(work_differences(recorded(base), work_identity(now)) == row.differences);
  }
  SUBCASE("a run without a readable spec.json differs in everything asked for") {
    auto d = work_differences(json(), work_identity(base));
    REQUIRE(!d.empty());
    CHECK(d.front() == "entrypoint: (none) before, train.py now");
  }
}

TEST_CASE("launcher::newest_run_with_key and newest_run_named read state.json") {
  auto root = fs::temp_directory_path() / ("sgpu-keys-test-" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto write = [&](const std::string& id, json record) {
    fs::create_directories(root / id);
    record["run_id"] = id;
    record["started_at"] = "2026-12-03T09:15:00.000Z";  // the fields every state.json has
    record["world_size"] = 1;
    std::ofstream(root / id / "state.json") << record.dump();
  };
  write("20261203-091500-aa0001", {{"state", "failed"}, {"name", "nightly"}, {"idempotency_key", "K"}});
  write("20261203-091501-aa0002", {{"state", "succeeded"}, {"name", "nightly"}, {"idempotency_key", "K"}});
  write("20261203-091502-aa0003", {{"state", "succeeded"}, {"name", "other"}, {"idempotency_key", nullptr}});
  REQUIRE(newest_run_with_key(root.string(), "K"));
  CHECK(newest_run_with_key(root.string(), "K")->id == "20261203-091501-aa0002");
  CHECK_FALSE(newest_run_with_key(root.string(), "k"));
  CHECK(newest_run_named(root.string(), "nightly")->id == "20261203-091501-aa0002");
  CHECK(newest_run_named(root.string(), "other")->id == "20261203-091502-aa0003");
  CHECK_FALSE(newest_run_named(root.string(), "none"));
  CHECK_FALSE(newest_run_named((root / "absent").string(), "nightly"));
  fs::remove_all(root);
}
