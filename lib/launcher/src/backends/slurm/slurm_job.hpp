#pragma once
// sgpu as a SLURM client, the pure part: what an allocation sgpu runs inside
// looks like, the salloc and srun command lines it runs, and what it reads
// back from salloc and squeue. The processes themselves run from this
// folder: slurm_allocation.cpp (salloc), slurm_step.cpp (srun, squeue).
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher::slurm {

// The allocation sgpu was started in (salloc's shell, an sbatch script).
struct SlurmAllocation {
  std::string job_id;
  std::vector<std::string> nodes;  // SLURM_JOB_NODELIST expanded: node 0 first
  std::vector<int> cpus_per_node;  // SLURM_JOB_CPUS_PER_NODE, one per node
  std::string partition;
};

// nullopt without SLURM_JOB_ID. Throws sgpu::Error inside a job step
// (SLURM_STEP_ID set: `srun sgpu launch` would start one launcher per task),
// or when SLURM's variables do not fit together.
std::optional<SlurmAllocation> slurm_allocation(const env::Environment& env);

// A new allocation, for `--backend slurm` outside one.
struct SlurmRequest {
  int nodes = 1;
  std::optional<int> gpus_per_node;
  std::optional<int> cpus_per_node;  // the agent's task gets them all
  std::string partition;
  std::string account;
  std::string qos;
  std::string constraint;
  std::string reservation;
  std::optional<env::Seconds> time_limit;  // nullopt: the partition's default
  std::string job_name;
  std::string exclude;                  // --exclude's nodes, as a hostlist ("" none)
  std::string nodelist;                 // --include's nodes, as a hostlist: exactly `nodes` of them ("" none)
  std::vector<std::string> extra_args;  // [slurm] extra_args, as they are
  // --signal-before as SLURM's --signal=SIG@SECONDS (slurm_signal), "" for none.
  std::string signal;
  // --spares: a node that fails does not end the allocation (salloc --no-kill).
  bool no_kill = false;
};

// SLURM's --signal for sgpu's --signal-before `signal`, `before` the run's
// deadline: SLURM counts back from its own time limit, `margin` after sgpu's
// deadline (what it adds for start-up and the grace), so both mean one time.
// Whole seconds, rounded up, at most SLURM's 65535.
std::string slurm_signal(int signal, env::Seconds before, env::Seconds margin);

// squeue's %e (EndTime, "2026-12-05T01:02:03" in the local time zone) as a
// time; nullopt for none ("N/A", "Unknown", "NONE") or text that is not one.
std::optional<std::chrono::system_clock::time_point> parse_slurm_time(std::string_view text);

// SLURM's --time in whole minutes, rounded up, at least 1.
std::string slurm_time_limit(env::Seconds limit);

// salloc holding the allocation for as long as sgpu runs: its command is
// `sh -c 'read code; exit ...'` reading a pipe sgpu holds, and --kill-command
// ends that command (so salloc exits) when SLURM revokes the allocation. See
// slurm_allocation.hpp.
std::vector<std::string> salloc_argv(const SlurmRequest& request);

// The step that starts one agent per node: `srun --jobid J --nodes N
// --nodelist L --ntasks-per-node 1 ... <agent argv>`. The nodes are named so
// task k runs on the allocation's k-th node. The agent's task gets every CPU
// of its node in the job when `cpus_per_task` is known (ranks run under it);
// GPUs need nothing: a step gets all of the job's GPUs.
struct AgentStep {
  std::string job_id;
  std::vector<std::string> nodes;  // by node rank
  std::optional<int> cpus_per_task;
  std::vector<std::string> extra_args;
};
std::vector<std::string> agent_srun_argv(const AgentStep& step, const std::vector<std::string>& agent_argv);

// srun also reads its options from the environment an sbatch or salloc left
// (SLURM_GPUS_PER_TASK=1 from `--gpus-per-task 1`, SLURM_NTASKS_PER_NODE=8):
// they would shape the agents' step like the user's ranks and leave each
// agent one GPU. This is `inherited` without them.
env::Environment agent_srun_environment(const env::Environment& inherited);

// The hold command's exit code when its pipe closes without one (sgpu died).
inline constexpr int kSallocHoldNoCode = 1;

// Who an agent is, inside the step srun started: node rank SLURM_NODEID (the
// node's place in the step's node list, which sgpu asks for in the
// allocation's order), name SLURMD_NODENAME, and the launcher's host as srun
// itself reached this node from (SLURM_LAUNCH_NODE_IPADDR). Throws
// sgpu::Error outside a step.
struct SlurmStepIdentity {
  int node_rank = 0;
  std::string node_name;
  std::string launcher_addr;  // "" when SLURM does not say
};
SlurmStepIdentity slurm_step_identity(const env::Environment& env);

// CUDA_VISIBLE_DEVICES for a step whose SLURM set none but said which GPUs
// it has (SLURM_STEP_GPUS, else SLURM_JOB_GPUS); nullopt: leave it be.
std::optional<std::string> slurm_visible_devices(const env::Environment& env);

// The SLURM task variables a rank gets in place of its agent's, so code that
// reads SLURM's (Lightning, submitit) sees the same rank as torchrun's do.
env::Environment slurm_rank_environment(const env::RankPlacement& place);

// One line salloc writes on stderr.
struct SallocLine {
  enum class Kind { Other, Pending, Granted, Revoked, TimeLimit, Error };
  Kind kind = Kind::Other;
  std::string job_id;   // Pending, Granted, Revoked, TimeLimit
  std::string message;  // Error: the text after "salloc: error: "
};
SallocLine parse_salloc_line(std::string_view line);

// One line srun or a slurmstepd writes on the agents' step's stderr that
// says something about a node or the job.
struct SrunLine {
  enum class Kind {
    Other,
    TaskEnded,    // "srun: error: node2: task 1: Exited with exit code 3" (or Killed, Terminated, ...)
    NodeFailure,  // "srun: error: Node failure on node2"
    Cancelled,    // "slurmstepd-node1: error: *** STEP 5.0 ON node1 CANCELLED AT ... [DUE TO TIME LIMIT] ***"
    Aborted,      // "srun: Job step aborted: ...": SLURM ended the step (the banner above may be lost)
    Error,        // any other "srun: error: ..."
  };
  Kind kind = Kind::Other;
  std::string node;
  int task = -1;       // TaskEnded
  std::string detail;  // TaskEnded: "Exited with exit code 3"; Cancelled: "TIME LIMIT", "NODE FAILURE" or "" (scancel);
                       // Error: the message
};
SrunLine parse_srun_line(std::string_view line);

// squeue -h -o '%T|%r' for one job.
struct SlurmJobState {
  std::string state;   // PENDING, RUNNING, COMPLETING, ...
  std::string reason;  // Resources, Priority, None, ...
};
inline constexpr std::string_view kSqueueFormat = "%T|%r";
std::optional<SlurmJobState> parse_squeue_line(std::string_view line);

}  // namespace sgpu::launcher::slurm
