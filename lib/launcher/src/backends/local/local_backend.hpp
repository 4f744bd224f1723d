#pragma once
// The local backend: every rank on this node, under one Supervisor.
#include "sgpu/launcher/backend.hpp"

namespace sgpu::launcher::local {

BackendInfo info();

}  // namespace sgpu::launcher::local
