#include "sgpu/launcher/plan/ray.hpp"

#include <filesystem>

#include <fmt/format.h>

namespace sgpu::launcher {
namespace fs = std::filesystem;

std::string ray_temp_dir(const std::string& run_dir, const std::string& run_id) {
  auto inside = (fs::path(run_dir) / "ray").string();
  if (inside.size() <= kRayMaxTempDir) return inside;
  return "/tmp/sgpu-ray-" + run_id;
}

std::string ray_metrics_path(const std::string& run_dir) {
  return (fs::path(run_dir) / "ray" / "metrics.jsonl").string();
}

std::string ray_token(const rendezvous::Secret& secret) { return rendezvous::derive_hex(secret, "sgpu ray token"); }

std::string ray_node_resource(int node_rank) { return fmt::format("sgpu_node_{}", node_rank); }

std::vector<std::string> ray_start_args(const RayNode& node) {
  std::vector<std::string> args{"ray", "start"};
  if (node.node_rank == 0) {
    args.push_back("--head");
    // Port 0 only in a dry run: the port is reserved at launch.
    args.push_back(node.port > 0 ? fmt::format("--port={}", node.port) : "--port=<master port>");
    args.push_back("--node-ip-address=" + node.head_addr);
    args.push_back("--temp-dir=" + node.temp_dir);
    args.push_back(node.dashboard ? "--include-dashboard=true" : "--include-dashboard=false");
    if (node.agent_ports.size() == 3) {
      args.push_back(fmt::format("--dashboard-agent-grpc-port={}", node.agent_ports[0]));
      args.push_back(fmt::format("--metrics-export-port={}", node.agent_ports[1]));
      args.push_back(fmt::format("--runtime-env-agent-port={}", node.agent_ports[2]));
    }
  }
  args.push_back(fmt::format("{}={}", node.gpus ? "--num-gpus" : "--num-cpus", node.slots));
  args.push_back(fmt::format(R"(--resources={{"{}": 1}})", ray_node_resource(node.node_rank)));
  args.push_back("--disable-usage-stats");
  args.push_back("--block");
  return args;
}

std::vector<std::string> ray_node_argv(const std::string& python, const RayNode& node,
                                       const std::vector<std::string>& driver) {
  // The source travels in the environment, so the command line stays short
  // and readable (`ps` shows the ray start it runs and the driver).
  std::vector<std::string> argv{python, "-c", "import os; exec(os.environ.pop('SGPU_RAY_HELPER'))"};
  for (auto& a : ray_start_args(node)) argv.push_back(std::move(a));
  argv.emplace_back("--");
  argv.insert(argv.end(), driver.begin(), driver.end());
  return argv;
}

void add_ray_env(env::Environment& rank_env, const RayNode& node, const std::string& run_dir,
                 const std::string& token) {
  rank_env["SGPU_RAY_HELPER"] = ray_node_helper_source();
  rank_env["SGPU_RAY_NODES"] = std::to_string(node.nnodes);
  rank_env["SGPU_RAY_WAIT"] = fmt::format("{}", node.wait_s);
  rank_env["SGPU_RAY_LOG"] = (fs::path(run_dir) / "ranks" / std::to_string(node.node_rank) / "ray-start.log").string();
  auto inside = (fs::path(run_dir) / "ray").string();
  if (node.node_rank == 0 && node.temp_dir != inside) rank_env["SGPU_RAY_LINK"] = inside;
  if (node.node_rank == 0 && node.metrics) rank_env["SGPU_RAY_METRICS"] = ray_metrics_path(run_dir);
  rank_env["RAY_USAGE_STATS_ENABLED"] = "0";
  if (!token.empty()) {
    // Ray >= 2.52 checks it on every RPC; the variable, unlike a flag, is
    // readable only by the job's own user.
    rank_env["RAY_AUTH_MODE"] = "token";
    rank_env["RAY_AUTH_TOKEN"] = token;
  }
}

}  // namespace sgpu::launcher
