#pragma once
// `sgpu launch --preflight`: the job's GPUs checked (NVML health, an NCCL
// all-reduce: sgpu doctor's checks) after the ranks are planned and before
// any starts.
#include "sgpu/launcher/backend.hpp"

namespace sgpu::launcher {

// Before anything starts: the [preflight] settings and the backend. Throws
// sgpu::Error (2) naming the setting at fault.
void check_launch_preflight(const JobSpec& spec, const BackendInfo& backend);

// Runs the check on exactly the plan's GPUs and prints its one-line result;
// the report stays in `run_dir` (preflight.json). Throws sgpu::Error
// when a check fails (1, naming the GPU) or none could run (3: no driver,
// NCCL or GPU), so no rank starts.
void run_launch_preflight(const LaunchContext& ctx, const std::string& run_dir, const LaunchPlan& plan);

}  // namespace sgpu::launcher
