#include <algorithm>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "backends/slurm/slurm_job.hpp"
#include "sgpu/env/error.hpp"

using namespace sgpu::launcher::slurm;
using sgpu::env::Environment;
using sgpu::env::RankPlacement;
using sgpu::env::Seconds;
using Args = std::vector<std::string>;

TEST_CASE("slurm::slurm_allocation") {
  SUBCASE("outside an allocation") { CHECK_FALSE(slurm_allocation({{"HOME", "/root"}}).has_value()); }
  SUBCASE("salloc's shell or an sbatch script") {
    auto a = slurm_allocation({{"SLURM_JOB_ID", "42"},
                               {"SLURM_JOB_NODELIST", "gpu[07-08],login1"},
                               {"SLURM_JOB_CPUS_PER_NODE", "16(x2),4"},
                               {"SLURM_JOB_PARTITION", "a100"},
                               {"SLURM_PROCID", "0"}});  // set in batch scripts too
    REQUIRE(a.has_value());
    CHECK(a->job_id == "42");
    CHECK(a->nodes == Args{"gpu07", "gpu08", "login1"});
    CHECK(a->cpus_per_node == std::vector<int>{16, 16, 4});
    CHECK(a->partition == "a100");
  }
  SUBCASE("older SLURM spells them SLURM_JOBID and SLURM_NODELIST") {
    auto a = slurm_allocation({{"SLURM_JOBID", "7"}, {"SLURM_NODELIST", "n1"}});
    REQUIRE(a.has_value());
    CHECK(a->job_id == "7");
    CHECK(a->nodes == Args{"n1"});
    CHECK(a->cpus_per_node.empty());
  }
  SUBCASE("inside a job step") {
    CHECK_THROWS_WITH_AS(
        slurm_allocation({{"SLURM_JOB_ID", "42"}, {"SLURM_STEP_ID", "0"}, {"SLURM_JOB_NODELIST", "n1"}}),
        doctest::Contains("runs inside SLURM step 42.0 (SLURM_STEP_ID is set)"), sgpu::Error);
  }
  SUBCASE("variables that do not fit") {
    CHECK_THROWS_WITH_AS(slurm_allocation({{"SLURM_JOB_ID", "42"}}), doctest::Contains("SLURM_JOB_NODELIST is not"),
                         sgpu::Error);
    CHECK_THROWS_WITH_AS(slurm_allocation({{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "n[1-"}}),
                         doctest::Contains("SLURM_JOB_NODELIST: invalid hostlist 'n[1-'"), sgpu::Error);
    CHECK_THROWS_WITH_AS(
        slurm_allocation(
            {{"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "n[1-3]"}, {"SLURM_JOB_CPUS_PER_NODE", "8(x2)"}}),
        doctest::Contains("SLURM_JOB_CPUS_PER_NODE=8(x2) counts 2 nodes but SLURM_JOB_NODELIST=n[1-3] "
                          "names 3"),
        sgpu::Error);
  }
}

TEST_CASE("slurm::slurm_time_limit") {
  struct Row {
    double seconds;
    const char* minutes;
  };
  const Row rows[] = {{1, "1"}, {59, "1"}, {60, "1"}, {61, "2"}, {10800 + 30, "181"}, {86400, "1440"}};
  for (const auto& row : rows) {
    CAPTURE(row.seconds);
    CHECK(slurm_time_limit(Seconds(row.seconds)) == row.minutes);
  }
}

TEST_CASE("slurm::salloc_argv") {
  SlurmRequest r;
  r.nodes = 2;
  const Args hold = {"--kill-command=TERM", "--", "/bin/sh", "-c", "read code; exit ${code:-1}"};
  Args expected = {"salloc", "--nodes=2", "--ntasks-per-node=1"};
  expected.insert(expected.end(), hold.begin(), hold.end());
  CHECK(salloc_argv(r) == expected);
  r.gpus_per_node = 8;
  r.cpus_per_node = 4;
  r.partition = "gpu";
  r.account = "proj";
  r.qos = "high";
  r.constraint = "h100&ib";
  r.reservation = "maint";
  r.time_limit = Seconds(3 * 3600 + 30);
  r.job_name = "sgpu:train.py";
  r.extra_args = {"--exclusive", "--mem=0"};
  expected = {"salloc",
              "--nodes=2",
              "--ntasks-per-node=1",
              "--gpus-per-node=8",
              "--cpus-per-task=4",
              "--partition=gpu",
              "--account=proj",
              "--qos=high",
              "--constraint=h100&ib",
              "--reservation=maint",
              "--time=181",
              "--job-name=sgpu:train.py",
              "--exclusive",
              "--mem=0"};
  expected.insert(expected.end(), hold.begin(), hold.end());
  CHECK(salloc_argv(r) == expected);
}

TEST_CASE("slurm::agent_srun_argv") {
  AgentStep step{"42", {"gpu07", "gpu08", "gpu03"}, 16, {"--exclusive"}};
  CHECK(agent_srun_argv(step, {"/opt/sgpu", "agent", "--rdzv", "h:1"}) ==
        Args{"srun", "--jobid=42", "--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--nodelist=gpu[07-08,03]",
             "--distribution=block", "--kill-on-bad-exit=0", "--input=none", "--mpi=none", "--job-name=sgpu-agent",
             "--cpus-per-task=16", "--exclusive", "--", "/opt/sgpu", "agent", "--rdzv", "h:1"});
  step.cpus_per_task.reset();
  step.extra_args.clear();
  auto plain = agent_srun_argv(step, {"sgpu"});
  CHECK(plain.size() == 13);
  CHECK(std::none_of(plain.begin(), plain.end(), [](const std::string& a) { return a.rfind("--cpus", 0) == 0; }));
}

TEST_CASE("slurm::agent_srun_environment") {
  Environment in = {{"SLURM_JOB_ID", "42"},
                    {"SLURM_GPUS_PER_TASK", "1"},
                    {"SLURM_NTASKS", "16"},
                    {"SLURM_NTASKS_PER_NODE", "8"},
                    {"SLURM_CPUS_PER_TASK", "4"},
                    {"SLURM_CONF", "/etc/slurm.conf"},
                    {"PATH", "/bin"},
                    {"SLURM_GPUS_PER_NODE", "8"}};
  auto out = agent_srun_environment(in);
  CHECK(out ==
        Environment{
            {"SLURM_JOB_ID", "42"}, {"SLURM_CONF", "/etc/slurm.conf"}, {"PATH", "/bin"}, {"SLURM_GPUS_PER_NODE", "8"}});
}

TEST_CASE("slurm::parse_salloc_line") {
  using Kind = SallocLine::Kind;
  struct Row {
    const char* line;
    Kind kind;
    const char* job_id;
    const char* message;
  };
  // As salloc 22.05 writes them.
  const Row rows[] = {
      {"salloc: Pending job allocation 8", Kind::Pending, "8", ""},
      {"salloc: job 8 queued and waiting for resources", Kind::Other, "", ""},
      {"salloc: job 8 has been allocated resources", Kind::Other, "", ""},
      {"salloc: Granted job allocation 8", Kind::Granted, "8", ""},
      {"salloc: Granted job allocation 8\r", Kind::Granted, "8", ""},
      {"salloc: error: Job submit/allocate failed: Requested node configuration is not available", Kind::Error, "",
       "Job submit/allocate failed: Requested node configuration is not available"},
      {"salloc: Job has been cancelled", Kind::Other, "", ""},
      {"salloc: Job allocation 4 has been revoked.", Kind::Revoked, "4", ""},
      {"salloc: Job 3 has exceeded its time limit and its allocation has been revoked.", Kind::TimeLimit, "3", ""},
      {"", Kind::Other, "", ""},
  };
  for (const auto& row : rows) {
    std::string text = row.line;
    CAPTURE(text);
    auto parsed = parse_salloc_line(row.line);
    CHECK(parsed.kind == row.kind);
    CHECK(parsed.job_id == row.job_id);
    CHECK(parsed.message == row.message);
  }
}

TEST_CASE("slurm::parse_squeue_line") {
  auto s = parse_squeue_line("PENDING|Resources\n");
  REQUIRE(s.has_value());
  CHECK(s->state == "PENDING");
  CHECK(s->reason == "Resources");
  s = parse_squeue_line("RUNNING|None");
  REQUIRE(s.has_value());
  CHECK(s->state == "RUNNING");
  CHECK_FALSE(parse_squeue_line("").has_value());
  CHECK_FALSE(parse_squeue_line("slurm_load_jobs error: Invalid job id specified").has_value());
}

TEST_CASE("slurm::parse_srun_line") {
  using Kind = SrunLine::Kind;
  struct Row {
    const char* line;
    Kind kind;
    const char* node;
    int task;
    const char* detail;
  };
  // As srun and slurmstepd 22.05 write them (scripts/slurm-cluster).
  const Row rows[] = {
      {"srun: error: node2: task 1: Exited with exit code 3", Kind::TaskEnded, "node2", 1, "Exited with exit code 3"},
      {"srun: error: node2: task 1: Killed", Kind::TaskEnded, "node2", 1, "Killed"},
      {"srun: error: gpu-a07: task 12: Terminated\n", Kind::TaskEnded, "gpu-a07", 12, "Terminated"},
      {"srun: error: Node failure on node2", Kind::NodeFailure, "node2", -1, ""},
      {"slurmstepd-node1: error: *** STEP 5.0 ON node1 CANCELLED AT 2026-12-02T13:43:21 DUE TO TIME LIMIT ***",
       Kind::Cancelled, "node1", -1, "TIME LIMIT"},
      {"slurmstepd-node1: error: *** JOB 5 ON node1 CANCELLED AT 2026-12-02T13:43:21 DUE TO TIME LIMIT ***",
       Kind::Cancelled, "node1", -1, "TIME LIMIT"},
      {"slurmstepd-node1: error: *** STEP 12.0 ON node1 CANCELLED AT 2026-12-02T13:14:33 DUE TO NODE FAILURE, SEE "
       "SLURMCTLD LOG FOR DETAILS ***",
       Kind::Cancelled, "node1", -1, "NODE FAILURE"},
      {"slurmstepd-node1: error: *** STEP 11.0 ON node1 CANCELLED AT 2026-12-02T13:14:05 ***", Kind::Cancelled, "node1",
       -1, ""},
      {"srun: error: Unable to create step for job 1: More processors requested than permitted", Kind::Error, "", -1,
       "Unable to create step for job 1: More processors requested than permitted"},
      {"srun: Job step aborted: Waiting up to 4 seconds for job step to finish.", Kind::Aborted, "", -1, ""},
      {"srun: Force Terminated StepId=10.0", Kind::Other, "", -1, ""},
      {"[3]: loss 0.25 *** CANCELLED AT nothing", Kind::Other, "", -1, ""},
      {"", Kind::Other, "", -1, ""},
  };
  for (const auto& row : rows) {
    std::string text = row.line;
    CAPTURE(text);
    auto parsed = parse_srun_line(row.line);
    CHECK(parsed.kind == row.kind);
    CHECK(parsed.node == row.node);
    CHECK(parsed.task == row.task);
    CHECK(parsed.detail == row.detail);
  }
}

TEST_CASE("slurm::slurm_step_identity") {
  Environment step = {{"SLURM_STEP_ID", "0"},
                      {"SLURM_NODEID", "2"},
                      {"SLURMD_NODENAME", "gpu07"},
                      {"SLURM_LAUNCH_NODE_IPADDR", "10.1.2.3"}};
  auto id = slurm_step_identity(step);
  CHECK(id.node_rank == 2);
  CHECK(id.node_name == "gpu07");
  CHECK(id.launcher_addr == "10.1.2.3");
  step.erase("SLURM_LAUNCH_NODE_IPADDR");
  CHECK(slurm_step_identity(step).launcher_addr.empty());
  step.erase("SLURM_STEP_ID");  // an sbatch script: SLURM_NODEID is set there too
  CHECK_THROWS_WITH_AS(slurm_step_identity(step), doctest::Contains("not in a SLURM job step"), sgpu::Error);
  CHECK_THROWS_WITH_AS(slurm_step_identity({{"SLURM_STEP_ID", "0"}, {"SLURM_NODEID", "x"}, {"SLURMD_NODENAME", "n"}}),
                       doctest::Contains("SLURM_NODEID=x: expected a node index"), sgpu::Error);
}

TEST_CASE("slurm::slurm_visible_devices") {
  CHECK_FALSE(slurm_visible_devices({}).has_value());
  CHECK(slurm_visible_devices({{"SLURM_STEP_GPUS", "4-6"}, {"SLURM_JOB_GPUS", "0-7"}}) == "4,5,6");
  CHECK(slurm_visible_devices({{"SLURM_JOB_GPUS", "2,3"}}) == "2,3");
  // SLURM's own CUDA_VISIBLE_DEVICES wins: with cgroups it is renumbered.
  CHECK_FALSE(slurm_visible_devices({{"SLURM_STEP_GPUS", "4"}, {"CUDA_VISIBLE_DEVICES", "0"}}).has_value());
  CHECK_THROWS_WITH_AS(slurm_visible_devices({{"SLURM_STEP_GPUS", "gpu:2"}}),
                       doctest::Contains("SLURM_STEP_GPUS: invalid GPU ids"), sgpu::Error);
}

TEST_CASE("slurm::slurm_rank_environment") {
  RankPlacement p;
  p.rank = 5;
  p.local_rank = 1;
  p.world_size = 8;
  p.local_world_size = 4;
  p.node_rank = 1;
  p.nnodes = 2;
  CHECK(slurm_rank_environment(p) == Environment{{"SLURM_PROCID", "5"},
                                                 {"SLURM_LOCALID", "1"},
                                                 {"SLURM_NODEID", "1"},
                                                 {"SLURM_NTASKS", "8"},
                                                 {"SLURM_NPROCS", "8"},
                                                 {"SLURM_STEP_NUM_TASKS", "8"},
                                                 {"SLURM_NTASKS_PER_NODE", "4"},
                                                 {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                                 {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"}});
}

TEST_CASE("slurm::slurm_signal") {
  struct Row {
    int signal;
    double before, margin;
    const char* expected;
  };
  const Row rows[] = {
      {12, 60, 0, "USR2@60"},       // no --timeout: SLURM's own limit is the deadline
      {12, 8, 90, "USR2@98"},       // sgpu's deadline comes 90 s before SLURM's limit
      {10, 0.2, 0, "USR1@1"},       // rounded up to whole seconds
      {15, 86400, 0, "TERM@65535"}  // SLURM's largest
  };
  for (const auto& row : rows) {
    CAPTURE(row.expected);
    CHECK(slurm_signal(row.signal, Seconds(row.before), Seconds(row.margin)) == row.expected);
  }
  SlurmRequest r;
  r.signal = "USR2@60";
  auto argv = salloc_argv(r);
  CHECK(std::find(argv.begin(), argv.end(), "--signal=USR2@60") != argv.end());
}

TEST_CASE("slurm::parse_slurm_time") {
  auto t = parse_slurm_time("2026-12-05T01:02:03\n");
  REQUIRE(t);
  auto tt = std::chrono::system_clock::to_time_t(*t);
  std::tm local{};
  localtime_r(&tt, &local);
  CHECK(local.tm_year == 126);
  CHECK(local.tm_hour == 1);
  CHECK(local.tm_sec == 3);
  for (const char* none : {"N/A", "Unknown", "NONE", "", "2026-12-05", "2026-12-05T01:02:03x"}) {
    CAPTURE(none);
    CHECK_FALSE(parse_slurm_time(none));
  }
}
