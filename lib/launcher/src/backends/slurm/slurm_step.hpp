#pragma once
// The SLURM side of a running job, on sgpu's event loop: the srun step that
// starts one agent per node, and short squeue questions about the job.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "backends/slurm/slurm_job.hpp"
#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

// `srun ... sgpu agent ...`: its stdout and stderr carry srun's own verdicts
// (a task that ended, a node failure, the step cancelled and why) and
// whatever the agents print before they reach the launcher.
class AgentStepProcess {
 public:
  struct Events {
    std::function<void(const slurm::SrunLine& parsed, const std::string& line)> line;  // every line, parsed
    std::function<void(int wait_status)> exited;                                       // after every line has been read
  };

  // Throws sgpu::Error if srun is not on PATH or cannot start.
  AgentStepProcess(boost::asio::io_context& io, const std::vector<std::string>& argv,
                   const env::Environment& environment, const std::string& cwd, Events events);
  ~AgentStepProcess();  // kills srun if it still runs (SLURM then ends the step)
  AgentStepProcess(const AgentStepProcess&) = delete;
  AgentStepProcess& operator=(const AgentStepProcess&) = delete;

  int pid() const;
  bool running() const;
  // srun passes SIGTERM and SIGINT on to the agents; a second SIGINT within
  // a second makes it end the step at once.
  void signal(int sig) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs a short SLURM command (squeue, scancel) and hands back its stdout
// and wait status.
void run_slurm_command(boost::asio::io_context& io, const std::vector<std::string>& argv,
                       const env::Environment& environment,
                       std::function<void(const std::string& out, int wait_status)> done);

}  // namespace sgpu::launcher
