#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "backends/slurm/slurm_job.hpp"
#include "backends/slurm/slurm_launch.hpp"
#include "backends/slurm/slurm_settings.hpp"
#include "sgpu/env/error.hpp"

using sgpu::launcher::JobSpec;
using sgpu::launcher::plan_slurm_job;
using sgpu::launcher::slurm::SlurmAllocation;
using Args = std::vector<std::string>;

namespace {
JobSpec job() {
  JobSpec s;
  s.entrypoint.target = "/work/train.py";
  s.backend = "slurm";
  return s;
}
SlurmAllocation allocation(Args nodes) { return {"42", std::move(nodes), {}, "gpu"}; }
}  // namespace

TEST_CASE("launcher::plan_slurm_job inside an allocation") {
  SUBCASE("every node of the allocation unless --nodes says fewer, node 0 first") {
    auto s = job();
    auto p = plan_slurm_job(s, allocation({"gpu07", "gpu08", "gpu10"}));
    CHECK(p.nnodes == 3);
    CHECK(p.nodes == Args{"gpu07", "gpu08", "gpu10"});
    CHECK(p.node_spec.nodes == 3);
    s.nodes = 2;
    s.origins["resources.nodes"] = "--nodes 2";
    p = plan_slurm_job(s, allocation({"gpu07", "gpu08", "gpu10"}));
    CHECK(p.nodes == Args{"gpu07", "gpu08"});
    CHECK(p.node_spec.nodes == 2);
  }
  SUBCASE("more nodes than the allocation has") {
    auto s = job();
    s.nodes = 4;
    s.origins["resources.nodes"] = "--nodes 4";
    CHECK_THROWS_WITH_AS(plan_slurm_job(s, allocation({"n1", "n2"})),
                         "--nodes 4: SLURM job 42 has 2 nodes (n[1-2]); ask for more with salloc/sbatch -N",
                         sgpu::Error);
  }
  SUBCASE("--gpus must split evenly over the nodes") {
    auto s = job();
    s.gpus = 3;
    CHECK_THROWS_WITH_AS(plan_slurm_job(s, allocation({"n1", "n2"})),
                         doctest::Contains("--gpus 3 does not split evenly over 2 nodes"), sgpu::Error);
  }
  SUBCASE("pool and partition settings are for new allocations: said, not used") {
    auto s = job();
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().pool = "reserved";
    auto p = plan_slurm_job(s, allocation({"n1"}));
    REQUIRE(p.notes.size() == 1);
    CHECK(p.notes[0].find("running inside SLURM job 42") != std::string::npos);
    CHECK(p.request.partition.empty());
  }
}

TEST_CASE("launcher::plan_slurm_job asks for a new allocation") {
  SUBCASE("nodes, GPUs, limits and the job's name") {
    auto s = job();
    s.nodes = 2;
    s.gpus_per_node = 8;
    s.timeout = "1h";
    s.grace = "30s";
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().partition = "a100";
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().account = "ml";
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().constraint = "ib";
    auto p = plan_slurm_job(s, std::nullopt);
    CHECK(p.nnodes == 2);
    CHECK(p.request.nodes == 2);
    CHECK(p.request.gpus_per_node == 8);
    CHECK(p.request.partition == "a100");
    CHECK(p.request.account == "ml");
    CHECK(p.request.constraint == "ib");
    // sgpu's timeout + its grace + a minute to start: SLURM never cuts sgpu's own limit short
    REQUIRE(p.request.time_limit.has_value());
    CHECK(p.request.time_limit->count() == doctest::Approx(3600 + 30 + 60));
    CHECK(p.request.job_name == "sgpu:train.py");
  }
  SUBCASE("--gpus over nodes, --nproc as CPUs") {
    auto s = job();
    s.nodes = 2;
    s.gpus = 16;
    CHECK(plan_slurm_job(s, std::nullopt).request.gpus_per_node == 8);
    s = job();
    s.nproc = 4;
    CHECK(plan_slurm_job(s, std::nullopt).request.cpus_per_node == 4);
  }
  struct PoolCase {
    const char* pool;
    const char* partition;  // given with --partition
    const char* want_partition;
    const char* want_qos;
    const char* error;
  };
  const PoolCase cases[] = {
      {"reserved", "", "res", "res-q", nullptr},
      {"on-demand", "", "od", "", nullptr},
      {"reserved", "res", "res", "res-q", nullptr},
      {"reserved", "other", nullptr, nullptr,
       "--pool reserved means partition res (slurm.pools.reserved.partition), but --partition other asks for "
       "another; drop one of them"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.pool);
    CAPTURE(c.partition);
    auto s = job();
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().pool = c.pool;
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().partition = c.partition;
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().reserved_partition = "res";
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().reserved_qos = "res-q";
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().on_demand_partition = "od";
    if (c.error) {
      CHECK_THROWS_WITH_AS(plan_slurm_job(s, std::nullopt), c.error, sgpu::Error);
      continue;
    }
    auto p = plan_slurm_job(s, std::nullopt);
    CHECK(p.request.partition == c.want_partition);
    CHECK(p.request.qos == c.want_qos);
  }
  SUBCASE("a pool the spec does not map") {
    auto s = job();
    s.backend_settings.edit<sgpu::launcher::slurm::Settings>().pool = "on-demand";
    s.origins["slurm.pool"] = "SGPU_POOL=on-demand";
    CHECK_THROWS_WITH_AS(plan_slurm_job(s, std::nullopt),
                         doctest::Contains("SGPU_POOL=on-demand: the job spec names no partition or QoS for this "
                                           "pool; set slurm.pools.on_demand.partition"),
                         sgpu::Error);
  }
}

TEST_CASE("launcher::plan_slurm_job with --include/--exclude") {
  struct Row {
    const char* include;
    const char* exclude;
    int nodes;  // --nodes; 0: not given
    bool inside;
    Args chosen;         // inside an allocation of n[1-4]
    const char* salloc;  // a new allocation: its --exclude / --nodelist
    const char* error;   // "" none
  };
  const Row rows[] = {
      {"", "n2", 0, true, {"n1", "n3", "n4"}, "", ""},
      {"", "n[1-2]", 2, true, {"n3", "n4"}, "", ""},
      {"n4@n2", "", 0, true, {"n2", "n4"}, "", ""},  // the allocation's order
      {"", "n[1-3]", 2, true, {}, "", "--nodes 2: SLURM job 42 has 4 nodes (n[1-4]), 1 left after --include/--exclude"},
      {"", "n9", 0, true, {}, "", "--exclude n9: SLURM job 42 has no node n9 (it has n[1-4])"},
      {"", "n1:1", 0, true, {}, "", "leaves out whole nodes ('n1'), not GPUs"},
      {"", ":1", 0, true, {}, "", "--exclude :1: which node?"},
      {"", "n[1-2]", 2, false, {}, "--exclude=n[1-2]", ""},
      {"n3@n4", "", 2, false, {}, "--nodelist=n[3-4]", ""},
      {"n3", "", 2, false, {}, "", "--include n3: a new allocation takes exactly the nodes named"},
      {"n3@n4", "n4", 2, false, {}, "", "both name n4"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.include);
    CAPTURE(row.exclude);
    auto s = job();
    s.include = row.include;
    s.exclude = row.exclude;
    if (row.nodes > 0) {
      s.nodes = row.nodes;
      s.origins["resources.nodes"] = "--nodes " + std::to_string(row.nodes);
    }
    auto plan = [&] {
      return plan_slurm_job(s, row.inside ? std::optional(allocation({"n1", "n2", "n3", "n4"})) : std::nullopt);
    };
    if (*row.error != '\0') {
      CHECK_THROWS_WITH_AS(plan(), doctest::Contains(row.error), sgpu::Error);
      continue;
    }
    auto p = plan();
    if (row.inside) {
      CHECK(p.nodes == row.chosen);
      CHECK(p.nnodes == static_cast<int>(row.chosen.size()));
      REQUIRE(!p.notes.empty());
      CHECK(p.notes.back().find("nodes left out by --include/--exclude") != std::string::npos);
    } else {
      auto argv = sgpu::launcher::slurm::salloc_argv(p.request);
      CHECK(std::find(argv.begin(), argv.end(), std::string(row.salloc)) != argv.end());
    }
  }
}

TEST_CASE("launcher::plan_slurm_job with --spares") {
  auto s = job();
  s.spares = 1;
  SUBCASE("inside an allocation: the nodes after the job's are held") {
    auto p = plan_slurm_job(s, allocation({"n1", "n2", "n3"}));
    CHECK(p.nnodes == 2);  // without --nodes: every node but the spares
    CHECK(p.nodes == Args{"n1", "n2"});
    CHECK(p.spare_nodes == Args{"n3"});
    s.nodes = 3;
    s.origins["resources.nodes"] = "--nodes 3";
    CHECK_THROWS_WITH_AS(plan_slurm_job(s, allocation({"n1", "n2", "n3"})),
                         "--spares 1: SLURM job 42 has 3 usable nodes (n[1-3]), and the job needs 3 beside its "
                         "spares; ask for more with salloc/sbatch -N",
                         sgpu::Error);
  }
  SUBCASE("a new allocation asks for the spares too, and that a failed node not end it") {
    s.nodes = 2;
    s.origins["resources.nodes"] = "--nodes 2";
    auto p = plan_slurm_job(s, std::nullopt);
    CHECK(p.nnodes == 2);
    CHECK(p.spares == 1);
    CHECK(p.request.nodes == 3);
    CHECK(p.request.no_kill);
    auto argv = sgpu::launcher::slurm::salloc_argv(p.request);
    CHECK(std::find(argv.begin(), argv.end(), "--no-kill") != argv.end());
    CHECK(std::find(argv.begin(), argv.end(), "--nodes=3") != argv.end());
  }
}
