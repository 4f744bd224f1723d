#pragma once
// Starts one `sgpu doctor --worker` per GPU on an io_context and gathers what
// they report: rank 0 first, the others once its NCCL unique id is known. The
// first failure, or the time limit, kills every worker's process group.
#include <string>
#include <vector>

#include "sgpu/launcher/preflight/preflight.hpp"

namespace sgpu::launcher::preflight {

struct AllReduceOutcome {
  std::vector<SizeRow> sizes;         // sizes every rank finished, in order
  std::vector<std::string> failures;  // naming the GPU
  std::string unavailable;            // the GPU stack is missing: one line
  int nccl_version = 0;
};

AllReduceOutcome run_allreduce(const PreflightRequest& request);

}  // namespace sgpu::launcher::preflight
