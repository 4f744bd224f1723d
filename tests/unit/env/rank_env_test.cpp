#include <string>

#include <doctest/doctest.h>

#include "sgpu/env/rank_env.hpp"

using namespace sgpu::env;

TEST_CASE("env::build_rank_env") {
  Environment inherited{{"PATH", "/usr/bin"}, {"RANK", "99"}, {"HOME", "/root"}};
  JobEnvironment job;
  job.master_addr = "10.0.0.1";
  job.master_port = 29511;
  job.run_id = "run-1";
  job.gpu_type = "H100";
  job.cuda_visible_devices = "0,1";
  RankPlacement place{5, 1, 8, 4, 1, 2};
  RankFiles files{"/runs/r/ranks/5/error.json", "/runs/r/ranks/5/result"};
  auto env = build_rank_env(inherited, job, place, files);

  const std::pair<const char*, const char*> expected[] = {
      {"RANK", "5"},
      {"LOCAL_RANK", "1"},
      {"WORLD_SIZE", "8"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"GROUP_RANK", "1"},
      {"NODE_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"NNODES", "2"},
      {"ROLE_RANK", "5"},
      {"ROLE_NAME", "default"},
      {"ROLE_WORLD_SIZE", "8"},
      {"MASTER_ADDR", "10.0.0.1"},
      {"MASTER_PORT", "29511"},
      {"TORCHELASTIC_RUN_ID", "run-1"},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"TORCHELASTIC_ERROR_FILE", "/runs/r/ranks/5/error.json"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"OMP_NUM_THREADS", "1"},
      {"CUDA_DEVICE_ORDER", "PCI_BUS_ID"},
      {"CUDA_VISIBLE_DEVICES", "0,1"},
      {"SGPU_RUN_ID", "run-1"},
      {"SGPU_GPU_TYPE", "H100"},
      {"SGPU_RESULT_FILE", "/runs/r/ranks/5/result"},
      {"PATH", "/usr/bin"},
      {"HOME", "/root"},
  };
  for (const auto& [k, v] : expected) {
    const std::string key = k;  // clang 14 cannot capture a structured binding
    CAPTURE(key);
    REQUIRE(env.contains(k));
    CHECK(env.at(k) == v);
  }
  // Not the name torch < 2.2 read: torch 2.2 and later warn on every rank
  // when it is set (seen with torch 2.11 on an H200), as torchrun's ranks do not.
  CHECK_FALSE(env.contains("NCCL_ASYNC_ERROR_HANDLING"));

  SUBCASE("tuning defaults give way to the user's settings") {
    Environment mine{{"OMP_NUM_THREADS", "8"}};
    CHECK(build_rank_env(mine, job, place, files).at("OMP_NUM_THREADS") == "8");
    CHECK_FALSE(omp_threads_defaulted(mine, job));
    JobEnvironment with_extra = job;
    with_extra.extra["OMP_NUM_THREADS"] = "4";
    with_extra.extra["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0";
    auto e = build_rank_env(inherited, with_extra, place, files);
    CHECK(e.at("OMP_NUM_THREADS") == "4");
    CHECK(e.at("TORCH_NCCL_ASYNC_ERROR_HANDLING") == "0");
    CHECK(omp_threads_defaulted(inherited, job));
  }
  SUBCASE("identity variables cannot be overridden by [env]") {
    JobEnvironment with_extra = job;
    with_extra.extra["RANK"] = "7";
    CHECK(build_rank_env(inherited, with_extra, place, files).at("RANK") == "5");
  }
  SUBCASE("CUDA_VISIBLE_DEVICES is inherited when the job does not set it") {
    JobEnvironment cpu = job;
    cpu.cuda_visible_devices.reset();
    Environment with_cvd = inherited;
    with_cvd["CUDA_VISIBLE_DEVICES"] = "3";
    CHECK(build_rank_env(with_cvd, cpu, place, files).at("CUDA_VISIBLE_DEVICES") == "3");
  }
}

TEST_CASE("env::RankEnvironment: copies share one map until one of them writes") {
  RankEnvironment plan_copy = Environment{{"PATH", "/usr/bin"}, {"RANK", "3"}};
  RankEnvironment launch_copy = plan_copy;
  CHECK(&plan_copy.map() == &launch_copy.map());  // a copy made no map
  CHECK(launch_copy.at("RANK") == "3");
  CHECK(launch_copy.contains("PATH"));
  CHECK(launch_copy.find("HOME") == launch_copy.end());

  launch_copy["SGPU_DEADLINE"] = "1700000000";  // the writer gets its own
  CHECK(&plan_copy.map() != &launch_copy.map());
  CHECK(launch_copy.size() == 3);
  CHECK(plan_copy.size() == 2);
  CHECK_FALSE(plan_copy.contains("SGPU_DEADLINE"));

  auto& own = launch_copy.edit();  // no one shares it now: written in place
  own.erase("PATH");
  CHECK(&own == &launch_copy.map());
  CHECK(plan_copy.at("PATH") == "/usr/bin");

  RankEnvironment none;
  CHECK(none.empty());
  CHECK(none.begin() == none.end());
  none["A"] = "1";
  CHECK(static_cast<const Environment&>(none) == Environment{{"A", "1"}});
}
