#pragma once
// `sgpu launch --backend slurm` (and inside an allocation by default): runs
// the job through lib/launcher's slurm_launch and shows it as any launch.
#include <string>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::app {

// --backend slurm, or no --backend at all inside a SLURM allocation
// (SLURM_JOB_ID set) that is not a static multi-node launch.
bool use_slurm_backend(const launcher::JobSpec& spec, const env::Environment& inherited);

// Runs the job; returns sgpu's exit code.
int run_slurm_launch(const launcher::JobSpec& spec, const env::Environment& inherited, const std::string& cwd);

}  // namespace sgpu::app
