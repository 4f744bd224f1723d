#include <algorithm>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/plan/ray.hpp"

using namespace sgpu::launcher;
using Args = std::vector<std::string>;

TEST_CASE("launcher::ray_temp_dir") {
  struct Row {
    const char* run_dir;
    const char* expected;
  };
  const Row rows[] = {
      {"/r/20261203-130855-abcdef", "/r/20261203-130855-abcdef/ray"},
      // <run dir>/ray is 40 characters: still fits Ray's socket paths; one more does not.
      {"/runs/abcdefghi/20261203-130855-abcd", "/runs/abcdefghi/20261203-130855-abcd/ray"},
      {"/runs/abcdefghij/20261203-130855-abcd", "/tmp/sgpu-ray-20261203-130855-abcdef"},
      {"/tmp/pytest-of-root/pytest-3/test_local0/runs/20261203-130855-abcdef", "/tmp/sgpu-ray-20261203-130855-abcdef"},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.run_dir));
    CHECK(ray_temp_dir(row.run_dir, "20261203-130855-abcdef") == row.expected);
  }
}

TEST_CASE("launcher::ray_start_args") {
  struct Row {
    const char* what;
    RayNode node;
    Args expected;
  };
  const Row rows[] = {
      {"head with CPU slots",
       {.node_rank = 0, .nnodes = 1, .slots = 4, .head_addr = "127.0.0.1", .port = 29500, .temp_dir = "/r/ray"},
       {"ray", "start", "--head", "--port=29500", "--node-ip-address=127.0.0.1", "--temp-dir=/r/ray",
        "--include-dashboard=false", "--num-cpus=4", R"(--resources={"sgpu_node_0": 1})", "--disable-usage-stats",
        "--block"}},
      {"head with GPUs and the dashboard",
       {.node_rank = 0,
        .nnodes = 2,
        .slots = 2,
        .gpus = true,
        .head_addr = "10.0.0.1",
        .port = 31000,
        .temp_dir = "/t",
        .dashboard = true},
       {"ray", "start", "--head", "--port=31000", "--node-ip-address=10.0.0.1", "--temp-dir=/t",
        "--include-dashboard=true", "--num-gpus=2", R"(--resources={"sgpu_node_0": 1})", "--disable-usage-stats",
        "--block"}},
      {"the head's agents on reserved ports",
       {.node_rank = 0,
        .nnodes = 1,
        .slots = 1,
        .head_addr = "127.0.0.1",
        .port = 61001,
        .temp_dir = "/t",
        .agent_ports = {61002, 61003, 61004}},
       {"ray", "start", "--head", "--port=61001", "--node-ip-address=127.0.0.1", "--temp-dir=/t",
        "--include-dashboard=false", "--dashboard-agent-grpc-port=61002", "--metrics-export-port=61003",
        "--runtime-env-agent-port=61004", "--num-cpus=1", R"(--resources={"sgpu_node_0": 1})", "--disable-usage-stats",
        "--block"}},
      {"a dry run: the port is reserved at launch",
       {.node_rank = 0, .nnodes = 1, .slots = 1, .head_addr = "127.0.0.1", .port = 0, .temp_dir = "/t"},
       {"ray", "start", "--head", "--port=<master port>", "--node-ip-address=127.0.0.1", "--temp-dir=/t",
        "--include-dashboard=false", "--num-cpus=1", R"(--resources={"sgpu_node_0": 1})", "--disable-usage-stats",
        "--block"}},
      {"a worker: the helper adds --address and its own --node-ip-address",
       {.node_rank = 3, .nnodes = 4, .slots = 1, .head_addr = "10.0.0.1", .port = 31000, .temp_dir = "/t"},
       {"ray", "start", "--num-cpus=1", R"(--resources={"sgpu_node_3": 1})", "--disable-usage-stats", "--block"}},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.what));
    CHECK(ray_start_args(row.node) == row.expected);
  }
}

TEST_CASE("launcher::make_plan with --ray") {
  JobSpec spec;
  spec.entrypoint.kind = sgpu::env::Entrypoint::Kind::Script;
  spec.entrypoint.target = "driver.py";
  spec.entrypoint.args = {"--steps", "3"};
  spec.ray = true;
  spec.nproc = 3;
  PlanInputs in;
  in.executable = "/venv/bin/python";
  in.run_id = "20261203-130855-abcdef";
  in.run_dir = "/r/20261203-130855-abcdef";
  in.master_port = 29500;
  in.ray_token = "feedface";

  SUBCASE("one process per node, the driver's argv after --") {
    auto plan = make_plan(spec, in);
    REQUIRE(plan.ranks.size() == 1);
    CHECK(plan.argv.at(0) == "/venv/bin/python");
    CHECK(plan.argv.at(3) == "ray");
    CHECK(std::find(plan.argv.begin(), plan.argv.end(), "--num-cpus=3") != plan.argv.end());
    Args tail(plan.argv.end() - 6, plan.argv.end());
    CHECK(tail == Args{"--", "/venv/bin/python", "-u", "driver.py", "--steps", "3"});
    const auto& e = plan.ranks[0].env;
    CHECK(e.at("RAY_USAGE_STATS_ENABLED") == "0");
    CHECK(e.at("RAY_AUTH_MODE") == "token");
    CHECK(e.at("RAY_AUTH_TOKEN") == "feedface");
    CHECK(e.at("SGPU_RAY_NODES") == "1");
    CHECK(e.at("SGPU_RAY_WAIT") == "600");  // --join-timeout's default, 10m
    CHECK(e.at("WORLD_SIZE") == "1");
    CHECK(e.at("SGPU_RAY_LOG") == "/r/20261203-130855-abcdef/ranks/0/ray-start.log");
    CHECK(e.count("SGPU_RAY_LINK") == 0);  // the temp dir is inside the run dir
    CHECK(e.count("SGPU_RAY_METRICS") == 0);
    // The token is never on the command line.
    for (const auto& a : plan.argv) CHECK(a.find("feedface") == std::string::npos);
  }
  SUBCASE("the nodes are waited for as long as --join-timeout says; none: no limit") {
    spec.rendezvous.join_timeout = "90s";
    CHECK(make_plan(spec, in).ranks[0].env.at("SGPU_RAY_WAIT") == "90");
    spec.rendezvous.join_timeout = "none";
    CHECK(make_plan(spec, in).ranks[0].env.at("SGPU_RAY_WAIT") == "0");
  }
  SUBCASE("a long run dir: Ray's session in /tmp, linked from the run dir") {
    in.run_dir = "/a/long/path/to/the/runs/20261203-130855-abcdef";
    auto plan = make_plan(spec, in);
    CHECK(plan.ranks[0].env.at("SGPU_RAY_LINK") == in.run_dir + "/ray");
    CHECK(std::find(plan.argv.begin(), plan.argv.end(), "--temp-dir=/tmp/sgpu-ray-20261203-130855-abcdef") !=
          plan.argv.end());
  }
  SUBCASE("--ray-metrics: the head writes <run dir>/ray/metrics.jsonl") {
    spec.ray_metrics = true;
    auto plan = make_plan(spec, in);
    CHECK(plan.ranks[0].env.at("SGPU_RAY_METRICS") == "/r/20261203-130855-abcdef/ray/metrics.jsonl");
  }
  SUBCASE("no token: no authentication variables") {
    in.ray_token.clear();
    auto plan = make_plan(spec, in);
    CHECK(plan.ranks[0].env.count("RAY_AUTH_TOKEN") == 0);
  }
  SUBCASE("settings --ray cannot honour") {
    struct Row {
      const char* what;
      void (*change)(JobSpec&);
      const char* message;
    };
    const Row rows[] = {
        {"--no-python", [](JobSpec& s) { s.entrypoint.kind = sgpu::env::Entrypoint::Kind::Executable; },
         "--ray runs the entrypoint as the Ray driver with the job's Python interpreter: drop --no-python and give a "
         "script or -m module"},
        {"--max-restarts", [](JobSpec& s) { s.max_restarts = 2; },
         "--max-restarts 2: --ray does not restart the Ray cluster; drop it"},
    };
    for (const auto& row : rows) {
      CAPTURE(std::string(row.what));
      auto changed = spec;
      row.change(changed);
      try {
        make_plan(changed, in);
        FAIL("accepted");
      } catch (const sgpu::Error& e) {
        CHECK(std::string(e.what()) == row.message);
      }
    }
  }
}

TEST_CASE("launcher::rank_count with --ray is one per node") {
  JobSpec spec;
  spec.nproc = 8;
  CHECK(rank_count(spec, {}) == 8);
  spec.ray = true;
  CHECK(rank_count(spec, {}) == 1);
  CHECK(node_slots(spec, {}) == 8);
}
