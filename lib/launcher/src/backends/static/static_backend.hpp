#pragma once
// The static multi-node backend, as torchrun's: the same `sgpu launch
// --nnodes N --node-rank K --rdzv-endpoint HOST:PORT` on every node. What
// --backend calls "local" once a job names more than one node.
#include "sgpu/launcher/backend.hpp"

namespace sgpu::launcher::static_nodes {

BackendInfo info();

}  // namespace sgpu::launcher::static_nodes
