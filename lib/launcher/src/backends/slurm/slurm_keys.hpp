#pragma once
// The [slurm] table's rows of the job spec schema.
#include <vector>

#include "sgpu/launcher/spec/spec_schema.hpp"

namespace sgpu::launcher::slurm {

std::vector<KeyInfo> spec_keys();

}  // namespace sgpu::launcher::slurm
