#include <doctest/doctest.h>

#include <unistd.h>
#include <csignal>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/job/cluster_job.hpp"
#include "sgpu/launcher/job/job_wire.hpp"
#include "sgpu/launcher/outputs/console.hpp"
#include "sgpu/launcher/plan/plan.hpp"

using namespace sgpu::launcher;
using sgpu::env::JobEnd;

TEST_CASE("launcher::make_plan places a node's ranks in a multi-node job") {
  JobSpec spec;
  spec.entrypoint = {sgpu::env::Entrypoint::Kind::Executable, "/bin/true", {}};
  spec.nproc = 3;
  PlanInputs in;
  in.run_id = "run";
  in.run_dir = "/runs/run";
  in.executable = "/bin/true";
  in.cwd = "/";
  in.master_port = 29500;
  in.master_addr = "10.0.0.1";
  in.node_rank = 1;
  in.nnodes = 3;
  in.rank_base = 4;
  in.world_size = 9;
  auto plan = make_plan(spec, in);
  REQUIRE(plan.ranks.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CAPTURE(i);
    const auto& r = plan.ranks[static_cast<std::size_t>(i)];
    CHECK(r.place.rank == 4 + i);
    CHECK(r.place.local_rank == i);
    CHECK(r.env.at("RANK") == std::to_string(4 + i));
    CHECK(r.env.at("LOCAL_RANK") == std::to_string(i));
    CHECK(r.env.at("WORLD_SIZE") == "9");
    CHECK(r.env.at("LOCAL_WORLD_SIZE") == "3");
    CHECK(r.env.at("NODE_RANK") == "1");
    CHECK(r.env.at("NNODES") == "3");
    CHECK(r.env.at("MASTER_ADDR") == "10.0.0.1");
    CHECK(r.env.at("MASTER_PORT") == "29500");
    CHECK(r.files.error_file == "/runs/run/ranks/" + std::to_string(4 + i) + "/error.json");
  }
  SUBCASE("one node keeps its defaults") {
    PlanInputs one = in;
    one.node_rank = 0;
    one.nnodes = 1;
    one.rank_base.reset();
    one.world_size.reset();
    one.master_addr = "127.0.0.1";
    auto p = make_plan(spec, one);
    CHECK(p.ranks[2].env.at("WORLD_SIZE") == "3");
    CHECK(p.ranks[2].env.at("RANK") == "2");
    CHECK(p.ranks[2].env.at("MASTER_ADDR") == "127.0.0.1");
  }
}

TEST_CASE("launcher::encode_job and decode_job") {
  JobDescription job;
  job.spec.entrypoint = {sgpu::env::Entrypoint::Kind::Module, "pkg.train", {"--lr", "0.1", "", "a b"}};
  job.spec.python = "/usr/bin/python3";
  job.spec.gpus = 8;
  job.spec.nproc_mode = "auto";  // resolved by each agent on its own node
  job.spec.gpu_type = "H100";
  job.spec.gpu_bind = GpuBind::PerRank;
  job.spec.master_port = 29500;
  job.spec.timeout = "2h";
  job.spec.grace = "5s";
  job.spec.log_dir = "/shared/runs";
  job.spec.env = {{"NCCL_DEBUG", "INFO"}};
  job.spec.ray = true;
  job.spec.ray_metrics = true;
  job.cwd = "/home/me/project";
  job.added_env = {{"MLFLOW_RUN_ID", "abc"}};
  job.spec.preflight = {true, false, "64K", 3, "30s", "12.5"};
  job.spec.health_gate = false;
  job.spec.max_restarts = 4;
  job.spec.gpus_per_node = 2;
  auto back = decode_job(encode_job(job));
  CHECK(back.spec.gpus_per_node == 2);  // a node with more GPUs runs 2 ranks, the rest spares
  CHECK_FALSE(back.spec.health_gate);   // each agent gates its own GPUs, or not
  CHECK(back.spec.max_restarts == 4);   // and watches their XIDs when attempts may follow
  CHECK(back.spec.preflight.enabled);
  CHECK(back.spec.preflight.max_bytes == "64K");
  CHECK(back.spec.preflight.iters == 3);
  CHECK(back.spec.preflight.timeout == "30s");
  CHECK(back.spec.preflight.expect_busbw == "12.5");
  CHECK(back.spec.ray);
  CHECK_FALSE(back.spec.ray_dashboard);
  CHECK(back.spec.ray_metrics);
  CHECK(back.spec.entrypoint.kind == job.spec.entrypoint.kind);
  CHECK(back.spec.entrypoint.target == "pkg.train");
  CHECK(back.spec.entrypoint.args == job.spec.entrypoint.args);
  CHECK(back.spec.python == job.spec.python);
  CHECK(back.spec.gpus == 8);
  CHECK_FALSE(back.spec.nproc.has_value());
  CHECK(back.spec.nproc_mode == "auto");
  CHECK(back.spec.gpu_type == "H100");
  CHECK(back.spec.gpu_bind == GpuBind::PerRank);
  CHECK(back.spec.master_port == 29500);
  CHECK(back.spec.timeout == "2h");
  CHECK(back.spec.grace == "5s");
  CHECK(back.spec.log_dir == "/shared/runs");
  CHECK(back.spec.env == job.spec.env);
  CHECK(back.cwd == job.cwd);
  CHECK(back.added_env == job.added_env);
  CHECK(back.spec.stop_signal == 15);
  CHECK_FALSE(back.spec.signal_before);
  CHECK_FALSE(back.end_by);

  SUBCASE("how the job is stopped travels: the stop signal, the signal before the deadline, the allocation's end") {
    job.spec.stop_signal = 10;
    job.spec.signal_before = sgpu::env::SignalBefore{12, sgpu::env::Seconds(90)};
    job.end_by = 1800000000;
    auto stopped = decode_job(encode_job(job));
    CHECK(stopped.spec.stop_signal == 10);
    CHECK(stopped.spec.signal_before == job.spec.signal_before);
    CHECK(stopped.end_by == 1800000000);
  }

  CHECK_THROWS_WITH_AS(decode_job("not json"), doctest::Contains("cannot read"), sgpu::Error);
  CHECK_THROWS_WITH_AS(decode_job(R"({"format": 9})"), doctest::Contains("job description format 9"), sgpu::Error);
}

TEST_CASE("launcher::ClusterJob::job_plan lays every node's ranks out with their host") {
  JobSpec spec;
  spec.entrypoint = {sgpu::env::Entrypoint::Kind::Script, "train.py", {"--epochs", "3"}};
  spec.timeout = "1h";
  spec.grace = "5s";
  // Nodes of different sizes, reported out of order.
  auto plan = ClusterJob::job_plan(spec, "r1", "/runs/r1", "/work", {{1, "node-b", 2, 3}, {0, "node-a", 0, 2}},
                                   "10.0.0.1", 29500);
  REQUIRE(plan.ranks.size() == 5);
  struct Row {
    int rank, local, local_world, node;
    const char* host;
  };
  Row rows[] = {{0, 0, 2, 0, "node-a"},
                {1, 1, 2, 0, "node-a"},
                {2, 0, 3, 1, "node-b"},
                {3, 1, 3, 1, "node-b"},
                {4, 2, 3, 1, "node-b"}};
  for (const auto& row : rows) {
    const auto& r = plan.ranks[static_cast<std::size_t>(row.rank)];
    CAPTURE(row.rank);
    CHECK(r.place.rank == row.rank);
    CHECK(r.place.local_rank == row.local);
    CHECK(r.place.local_world_size == row.local_world);
    CHECK(r.place.node_rank == row.node);
    CHECK(r.place.world_size == 5);
    CHECK(r.place.nnodes == 2);
    CHECK(r.host == row.host);
    CHECK(r.files.error_file == "/runs/r1/ranks/" + std::to_string(row.rank) + "/error.json");
  }
  CHECK(plan.master_addr == "10.0.0.1");
  CHECK(plan.master_port == 29500);
  CHECK(plan.argv == std::vector<std::string>{"python3", "-u", "train.py", "--epochs", "3"});
  REQUIRE(plan.timeout);
  CHECK(plan.timeout->count() == 3600);
  CHECK(plan.grace.count() == 5);
}

TEST_CASE("env::describe_end_and_code") {
  JobEnd failed;
  failed.kind = JobEnd::Kind::RankFailed;
  failed.rank = 5;
  failed.status = sgpu::env::ExitStatus::exited(7);
  failed.host = "node-b";
  CHECK(sgpu::env::describe_end_and_code(failed) == "rank 5 (node-b) failed first: exit 7 (exit code 7)");
  JobEnd lost;
  lost.kind = JobEnd::Kind::NodeLost;
  lost.host = "node-c";
  lost.reason = "no message for 10s (--heartbeat-timeout)";
  CHECK(sgpu::env::describe_end_and_code(lost) ==
        "node node-c was lost: no message for 10s (--heartbeat-timeout) (exit code 1)");
  JobEnd interrupted;
  interrupted.kind = JobEnd::Kind::Interrupted;
  interrupted.signal = SIGTERM;
  interrupted.host = "node-b";
  CHECK(sgpu::env::describe_end_and_code(interrupted) == "interrupted by SIGTERM on node-b (exit code 143)");
  CHECK(sgpu::env::describe_end_and_code(JobEnd{}) == "every rank exited 0");
  CHECK(sgpu::env::job_exit_code(lost) == 1);
}
