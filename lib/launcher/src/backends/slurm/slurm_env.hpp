#pragma once
// The compact forms SLURM writes into a job's environment, parsed without
// asking SLURM. Every function names `what` (the variable) in its errors.
#include <string_view>
#include <vector>

namespace sgpu::launcher::slurm {

// SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE: "2(x3),1" -> 2 2 2 1.
std::vector<int> parse_slurm_counts(std::string_view text, std::string_view what);

// SLURM_JOB_GPUS, SLURM_STEP_GPUS, a CUDA_VISIBLE_DEVICES of indices:
// "0,1,2", "0-3,6" -> 0 1 2 3 6. Empty text is no GPUs.
std::vector<int> parse_gpu_ids(std::string_view text, std::string_view what);

}  // namespace sgpu::launcher::slurm
