#pragma once
// The [ssh] table's rows of the job spec schema.
#include <vector>

#include "sgpu/launcher/spec/spec_schema.hpp"

namespace sgpu::launcher::ssh {

std::vector<KeyInfo> spec_keys();

}  // namespace sgpu::launcher::ssh
