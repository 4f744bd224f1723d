// The backend registry: one line per backend. Adding a backend is a folder
// under backends/, its line here and its sources in lib/launcher/CMakeLists.txt
// (ARCHITECTURE.md, "Adding a backend").
#include <algorithm>

#include <fmt/format.h>

#include "backends/local/local_backend.hpp"
#include "backends/slurm/slurm_launch.hpp"
#include "backends/ssh/ssh_backend.hpp"
#include "backends/static/static_backend.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/backend.hpp"

namespace sgpu::launcher {
namespace {

void join_schema(const BackendInfo& b) { add_backend_keys(b.flag_name, b.keys ? b.keys() : std::vector<KeyInfo>{}); }

std::vector<BackendInfo>& table() {
  static std::vector<BackendInfo> all = [] {
    std::vector<BackendInfo> built_in = {
        local::info(),
        static_nodes::info(),
        ssh_backend_info(),
        slurm_backend_info(),
    };
    for (const auto& b : built_in) join_schema(b);
    return built_in;
  }();
  return all;
}

// The built-in backends' tables are in the schema before main() reads a spec.
[[maybe_unused]] const bool kListed = !table().empty();

// What --backend accepts, each name once, in registry order.
std::vector<std::string_view> flag_names() {
  std::vector<std::string_view> names;
  for (const auto& b : table())
    if (std::find(names.begin(), names.end(), b.flag_name) == names.end()) names.push_back(b.flag_name);
  return names;
}

std::string valid_names() {
  auto names = flag_names();
  std::string out;
  for (auto n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

}  // namespace

std::optional<LaunchPlan> Backend::prepare(const LaunchContext& ctx, const RunStart& run) {
  return ClusterJob::job_plan(ctx.spec, run.id, run.dir, ctx.cwd, {}, ctx.spec.rendezvous.master_addr, 0);
}

const std::vector<BackendInfo>& backends() { return table(); }

void register_backend(const BackendInfo& info) {
  auto& all = table();  // the built-in backends join the schema first
  join_schema(info);
  all.push_back(info);
}

const BackendInfo* find_backend(std::string_view name) {
  for (const auto& b : table())
    if (b.name == name) return &b;
  return nullptr;
}

const BackendInfo& choose_backend(const JobSpec& spec, const env::Environment& inherited) {
  // Named (--backend, the spec file, --set): only the backends answering to that name.
  bool named = spec.origins.contains("resources.backend");
  const BackendInfo* best = nullptr;
  int best_offer = -1;
  for (const auto& b : table()) {
    if (named && b.flag_name != spec.backend) continue;
    int offer = b.offer ? b.offer(spec, inherited) : 0;
    if (!named && offer <= 0) continue;
    if (offer > best_offer) {
      best = &b;
      best_offer = offer;
    }
  }
  if (best == nullptr)
    throw Error(fmt::format("{}: no such backend (valid: {})",
                            where_set(spec, "resources.backend", "--backend " + spec.backend), valid_names()));
  return *best;
}

}  // namespace sgpu::launcher
