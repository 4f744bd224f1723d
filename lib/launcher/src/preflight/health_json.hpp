#pragma once
// GPU and link health as JSON: the keys `sgpu doctor -o json` shows, and the
// facts a node's preflight report carries to the launcher (read back here).
#include <nlohmann/json.hpp>

#include "sgpu/launcher/preflight/checks.hpp"

namespace sgpu::launcher::preflight {

nlohmann::json gpu_json(const GpuHealth& gpu);
nlohmann::json link_json(const LinkHealth& link);
// Throw nlohmann::json::exception for a value of the wrong type; a missing
// key keeps its default.
GpuHealth gpu_from_json(const nlohmann::json& j);
LinkHealth link_from_json(const nlohmann::json& j);

}  // namespace sgpu::launcher::preflight
