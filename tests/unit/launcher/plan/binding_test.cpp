#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/env/gpu.hpp"
#include "sgpu/launcher/devices/topology.hpp"
#include "sgpu/launcher/plan/binding.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"

using namespace sgpu::launcher;

namespace {

constexpr const char* kSynthetic = "pack:2 numa:2 core:16 pu:1";  // 2 sockets x 2 NUMA nodes x 16 cores

// What hwloc makes of kSynthetic, written out: CPU i is core i, NUMA node i/16, socket i/32.
Topology two_by_two_by_sixteen() {
  Topology t;
  for (int i = 0; i < 64; ++i) t.cpus.push_back({i, i, i / 16, i / 32});
  return t;
}

// 8 GPUs, two on each NUMA node, as the fake NVML places them (SGPU_FAKE_DRIVER_NUMA=0,0,1,1,2,2,3,3).
const std::vector<int> kGpuNuma = {0, 0, 1, 1, 2, 2, 3, 3};

std::vector<std::string> lines(CpuBind mode, const Topology& t, const std::vector<int>& rank_numa) {
  auto bindings = plan_bindings(mode, t, rank_numa, "--cpu-bind");
  std::vector<std::string> out;
  for (std::size_t r = 0; r < bindings.size(); ++r) {
    std::optional<int> gpu;
    if (rank_numa[r] >= 0) gpu = static_cast<int>(r);
    out.push_back(binding_line(static_cast<int>(r), gpu, bindings[r], mode != CpuBind::None) + " / OMP " +
                  std::to_string(bindings[r].cores));
  }
  return out;
}

std::string error_of(CpuBind mode, const Topology& t, const std::vector<int>& rank_numa) {
  try {
    plan_bindings(mode, t, rank_numa, "--cpu-bind exclusive");
  } catch (const sgpu::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("launcher::load_topology reads hwloc's synthetic 2x2x16 machine (the test hook)") {
  auto t = load_topology({{"SGPU_TEST_HWLOC_TOPOLOGY", kSynthetic}}, "--cpu-bind");
  CHECK(t.source == std::string("SGPU_TEST_HWLOC_TOPOLOGY=") + kSynthetic);
  REQUIRE(t.cpus.size() == 64);
  for (const auto& c : t.cpus) {
    CAPTURE(c.os_index);
    CHECK(c.core == c.os_index);
    CHECK(c.numa == c.os_index / 16);
    CHECK(c.package == c.os_index / 32);
  }
  SUBCASE("a description hwloc cannot read is an error that names the hook") {
    CHECK_THROWS_WITH_AS(load_topology({{"SGPU_TEST_HWLOC_TOPOLOGY", "pack:two"}}, "--cpu-bind numa"),
                         doctest::Contains("--cpu-bind numa: SGPU_TEST_HWLOC_TOPOLOGY=pack:two: hwloc cannot read"),
                         sgpu::Error);
  }
  SUBCASE("this machine: the CPUs sgpu may use") {
    auto here = load_topology({}, "--cpu-bind");
    CHECK(here.source == "hwloc");
    CHECK_FALSE(here.cpus.empty());
  }
}

TEST_CASE("launcher::plan_bindings, 8 GPU ranks on 2 sockets x 2 NUMA nodes x 16 cores, every mode") {
  auto t = two_by_two_by_sixteen();
  struct Row {
    CpuBind mode;
    std::vector<std::string> expected;
  };
  const Row rows[] = {
      {CpuBind::None,
       {"rank 0 (GPU 0): cores 0-63, not bound / OMP 64", "rank 1 (GPU 1): cores 0-63, not bound / OMP 64",
        "rank 2 (GPU 2): cores 0-63, not bound / OMP 64", "rank 3 (GPU 3): cores 0-63, not bound / OMP 64",
        "rank 4 (GPU 4): cores 0-63, not bound / OMP 64", "rank 5 (GPU 5): cores 0-63, not bound / OMP 64",
        "rank 6 (GPU 6): cores 0-63, not bound / OMP 64", "rank 7 (GPU 7): cores 0-63, not bound / OMP 64"}},
      {CpuBind::Numa,
       {"rank 0 (GPU 0): cores 0-15, NUMA node 0 / OMP 16", "rank 1 (GPU 1): cores 0-15, NUMA node 0 / OMP 16",
        "rank 2 (GPU 2): cores 16-31, NUMA node 1 / OMP 16", "rank 3 (GPU 3): cores 16-31, NUMA node 1 / OMP 16",
        "rank 4 (GPU 4): cores 32-47, NUMA node 2 / OMP 16", "rank 5 (GPU 5): cores 32-47, NUMA node 2 / OMP 16",
        "rank 6 (GPU 6): cores 48-63, NUMA node 3 / OMP 16", "rank 7 (GPU 7): cores 48-63, NUMA node 3 / OMP 16"}},
      {CpuBind::Socket,
       {"rank 0 (GPU 0): cores 0-31, NUMA node 0 / OMP 32", "rank 1 (GPU 1): cores 0-31, NUMA node 0 / OMP 32",
        "rank 2 (GPU 2): cores 0-31, NUMA node 1 / OMP 32", "rank 3 (GPU 3): cores 0-31, NUMA node 1 / OMP 32",
        "rank 4 (GPU 4): cores 32-63, NUMA node 2 / OMP 32", "rank 5 (GPU 5): cores 32-63, NUMA node 2 / OMP 32",
        "rank 6 (GPU 6): cores 32-63, NUMA node 3 / OMP 32", "rank 7 (GPU 7): cores 32-63, NUMA node 3 / OMP 32"}},
      {CpuBind::Core,
       {"rank 0 (GPU 0): cores 0, NUMA node 0 / OMP 1", "rank 1 (GPU 1): cores 1, NUMA node 0 / OMP 1",
        "rank 2 (GPU 2): cores 16, NUMA node 1 / OMP 1", "rank 3 (GPU 3): cores 17, NUMA node 1 / OMP 1",
        "rank 4 (GPU 4): cores 32, NUMA node 2 / OMP 1", "rank 5 (GPU 5): cores 33, NUMA node 2 / OMP 1",
        "rank 6 (GPU 6): cores 48, NUMA node 3 / OMP 1", "rank 7 (GPU 7): cores 49, NUMA node 3 / OMP 1"}},
      {CpuBind::Exclusive,
       {"rank 0 (GPU 0): cores 0-7, NUMA node 0 / OMP 8", "rank 1 (GPU 1): cores 8-15, NUMA node 0 / OMP 8",
        "rank 2 (GPU 2): cores 16-23, NUMA node 1 / OMP 8", "rank 3 (GPU 3): cores 24-31, NUMA node 1 / OMP 8",
        "rank 4 (GPU 4): cores 32-39, NUMA node 2 / OMP 8", "rank 5 (GPU 5): cores 40-47, NUMA node 2 / OMP 8",
        "rank 6 (GPU 6): cores 48-55, NUMA node 3 / OMP 8", "rank 7 (GPU 7): cores 56-63, NUMA node 3 / OMP 8"}},
  };
  for (const auto& row : rows) {
    CAPTURE(cpu_bind_name(row.mode));
    CHECK(lines(row.mode, t, kGpuNuma) == row.expected);
  }
}

TEST_CASE("launcher::plan_bindings, 4 CPU ranks on the same machine, every mode") {
  auto t = two_by_two_by_sixteen();
  const std::vector<int> cpu_ranks(4, -1);
  struct Row {
    CpuBind mode;
    std::vector<std::string> expected;
  };
  const Row rows[] = {
      {CpuBind::None,
       {"rank 0: cores 0-63, not bound / OMP 64", "rank 1: cores 0-63, not bound / OMP 64",
        "rank 2: cores 0-63, not bound / OMP 64", "rank 3: cores 0-63, not bound / OMP 64"}},
      {CpuBind::Numa,
       {"rank 0: cores 0-15, NUMA node 0 / OMP 16", "rank 1: cores 16-31, NUMA node 1 / OMP 16",
        "rank 2: cores 32-47, NUMA node 2 / OMP 16", "rank 3: cores 48-63, NUMA node 3 / OMP 16"}},
      // A socket spans two NUMA nodes: its memory is left to the kernel.
      {CpuBind::Socket,
       {"rank 0: cores 0-31, every NUMA node / OMP 32", "rank 1: cores 0-31, every NUMA node / OMP 32",
        "rank 2: cores 32-63, every NUMA node / OMP 32", "rank 3: cores 32-63, every NUMA node / OMP 32"}},
      {CpuBind::Core,
       {"rank 0: cores 0, NUMA node 0 / OMP 1", "rank 1: cores 1, NUMA node 0 / OMP 1",
        "rank 2: cores 2, NUMA node 0 / OMP 1", "rank 3: cores 3, NUMA node 0 / OMP 1"}},
      {CpuBind::Exclusive,
       {"rank 0: cores 0-15, NUMA node 0 / OMP 16", "rank 1: cores 16-31, NUMA node 1 / OMP 16",
        "rank 2: cores 32-47, NUMA node 2 / OMP 16", "rank 3: cores 48-63, NUMA node 3 / OMP 16"}},
  };
  for (const auto& row : rows) {
    CAPTURE(cpu_bind_name(row.mode));
    CHECK(lines(row.mode, t, cpu_ranks) == row.expected);
  }
}

TEST_CASE("launcher::plan_bindings within the CPUs sgpu was given (a SLURM step, a cgroup, taskset)") {
  // sgpu may use NUMA node 1's CPUs 16-23 only.
  Topology t;
  for (int i = 16; i < 24; ++i) t.cpus.push_back({i, i, 1, 0});
  CHECK(lines(CpuBind::Core, t, {-1, -1}) ==
        std::vector<std::string>{"rank 0: cores 16, NUMA node 1 / OMP 1", "rank 1: cores 17, NUMA node 1 / OMP 1"});
  CHECK(lines(CpuBind::Numa, t, {1}) == std::vector<std::string>{"rank 0 (GPU 0): cores 16-23, NUMA node 1 / OMP 8"});
  CHECK(lines(CpuBind::None, t, {-1}) == std::vector<std::string>{"rank 0: cores 16-23, not bound / OMP 8"});
  SUBCASE("more ranks than cores: core shares them in turn") {
    auto b = plan_bindings(CpuBind::Core, t, std::vector<int>(9, -1), "--cpu-bind core");
    CHECK(b[8].cpus == std::vector<int>{16});
  }
}

TEST_CASE("launcher::plan_bindings with two hardware threads per core") {
  Topology t;
  for (int core = 0; core < 4; ++core) {  // Linux numbers core c's threads c and c+4
    t.cpus.push_back({core, core, 0, 0});
    t.cpus.push_back({core + 4, core, 0, 0});
  }
  auto b = plan_bindings(CpuBind::Core, t, {-1, -1}, "--cpu-bind core");
  CHECK(b[0].cpus == std::vector<int>{0, 4});
  CHECK(b[0].cores == 1);
  CHECK(b[1].cpus == std::vector<int>{1, 5});
}

TEST_CASE("launcher::plan_bindings errors say why, before any rank starts") {
  auto t = two_by_two_by_sixteen();
  SUBCASE("exclusive: fewer cores than GPU ranks on a NUMA node") {
    CHECK(error_of(CpuBind::Exclusive, t, std::vector<int>(17, 0)) ==
          "--cpu-bind exclusive: NUMA node 0 has 16 cores sgpu may use for the 17 ranks of its GPUs: each rank needs "
          "a core of its own; use --cpu-bind numa or core (shared)");
  }
  SUBCASE("exclusive: fewer cores than CPU ranks") {
    Topology two;
    two.cpus = {{0, 0, 0, 0}, {1, 1, 0, 0}};
    CHECK(error_of(CpuBind::Exclusive, two, {-1, -1, -1}) ==
          "--cpu-bind exclusive: 2 cores sgpu may use (CPUs 0-1) for 3 ranks: each rank needs a core of its own; use "
          "--cpu-bind core (shared) or fewer ranks");
  }
  SUBCASE("a GPU on a NUMA node none of whose CPUs sgpu may use") {
    Topology node0;
    for (int i = 0; i < 16; ++i) node0.cpus.push_back({i, i, 0, 0});
    CHECK(error_of(CpuBind::Numa, node0, {1}) ==
          "--cpu-bind exclusive: the GPU of local rank 0 is on NUMA node 1, which has none of the CPUs sgpu may use "
          "(0-15); use --cpu-bind core or none");
  }
}

TEST_CASE("launcher::cpu_list_text and numa_node_of") {
  CHECK(cpu_list_text({}) == "");
  CHECK(cpu_list_text({3}) == "3");
  CHECK(cpu_list_text({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11");
  auto t = two_by_two_by_sixteen();
  CHECK(numa_node_of(t, {16, 17, 40}) == 1);
  CHECK(numa_node_of(t, {}) == -1);
  CHECK(parse_cpu_bind("node") == CpuBind::Numa);
  CHECK_FALSE(parse_cpu_bind("core-complex").has_value());
}

TEST_CASE("launcher::make_dry_run shows the bindings and OMP_NUM_THREADS follows them") {
  auto spec = resolve_spec({file_layer(R"(
[job]
entrypoint = "train.py"
[resources]
gpus = 8
cpu_bind = "exclusive"
)",
                                       "job.toml")});
  auto gpus = sgpu::env::parse_fake_gpus("8xH100");
  for (std::size_t i = 0; i < gpus.size(); ++i) gpus[i].numa_node = kGpuNuma[i];
  DryRunInputs in;
  in.nodes = {{"this node", gpus}};
  in.topology = two_by_two_by_sixteen();
  in.backend = "local";
  in.cwd = "/work";
  in.executable = "/usr/bin/python3";
  in.runs_root = "/runs";
  auto dry = make_dry_run(spec, in);
  auto text = dry_run_text(dry);
  CHECK(text.find("    rank 3 (GPU 3): cores 24-31, NUMA node 1\n") != std::string::npos);
  auto doc = nlohmann::json::parse(dry_run_json(dry));
  CHECK(doc["cpu_bind"] == "exclusive");
  CHECK(doc["ranks"][3]["binding"] ==
        nlohmann::json({{"cpus", "24-31"}, {"cores", 8}, {"numa_node", 1}, {"bound", true}}));
  CHECK(doc["ranks"][3]["env"]["OMP_NUM_THREADS"] == "8");
  SUBCASE("a value the user set wins") {
    in.inherited = {{"OMP_NUM_THREADS", "3"}};
    auto mine = make_dry_run(spec, in);
    CHECK(mine.nodes[0].plan.ranks[3].env.at("OMP_NUM_THREADS") == "3");
  }
}
