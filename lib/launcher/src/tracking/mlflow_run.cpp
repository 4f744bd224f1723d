#include "tracking/mlflow_run.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sgpu/env/command.hpp"
#include "sgpu/env/secrets.hpp"
#include "sgpu/launcher/outputs/report.hpp"

namespace sgpu::launcher::mlflow {
namespace fs = std::filesystem;

namespace {

std::string_view kind_name(env::Entrypoint::Kind kind) {
  switch (kind) {
    case env::Entrypoint::Kind::Module:
      return "module";
    case env::Entrypoint::Kind::Executable:
      return "program";
    case env::Entrypoint::Kind::Script:
      break;
  }
  return "script";
}

std::string read_first_line(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

bool is_commit(std::string_view text) {
  if (text.size() != 40 && text.size() != 64) return false;
  return text.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// refs/heads/x in the loose refs, else in packed-refs.
std::string resolve_ref(const fs::path& common_dir, const std::string& ref) {
  auto loose = read_first_line(common_dir / ref);
  if (is_commit(loose)) return loose;
  std::ifstream packed(common_dir / "packed-refs");
  std::string line;
  while (std::getline(packed, line)) {
    auto space = line.find(' ');
    if (space != std::string::npos && line.substr(space + 1) == ref && is_commit(line.substr(0, space)))
      return line.substr(0, space);
  }
  return "";
}

}  // namespace

std::int64_t epoch_ms(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

KeyValues run_tags(const RunDescription& job, std::string_view git_commit, std::string_view parent_run_id) {
  KeyValues tags = {{"sgpu.run_id", job.sgpu_run_id},
                    {"sgpu.host", job.host},
                    {"mlflow.user", job.user},
                    {"mlflow.source.name", job.entrypoint.target},
                    {"mlflow.source.type", "LOCAL"}};
  if (!git_commit.empty()) tags.emplace_back("mlflow.source.git.commit", git_commit);
  if (!parent_run_id.empty()) tags.emplace_back("mlflow.parentRunId", parent_run_id);
  return tags;
}

KeyValues run_params(const RunDescription& job) {
  std::string args;
  for (const auto& a : env::mask_arguments(job.entrypoint.args))
    args += (args.empty() ? "" : " ") + env::shell_quote(a);
  KeyValues params = {{"sgpu.entrypoint", job.entrypoint.target},
                      {"sgpu.entrypoint_kind", std::string(kind_name(job.entrypoint.kind))},
                      {"sgpu.args", args},
                      {"sgpu.nnodes", std::to_string(job.nnodes)},
                      {"sgpu.gpus", std::to_string(job.gpus)},
                      {"sgpu.gpu_type", job.gpu_type.empty() ? "none" : job.gpu_type},
                      {"sgpu.backend", job.backend},
                      {"sgpu.timeout", job.timeout}};
  // Before a multi-node run's nodes have joined, the ranks are not known
  // yet: the world size is logged at the end, the ranks per node not at all.
  if (job.world_size > 0) params.emplace_back("sgpu.world_size", std::to_string(job.world_size));
  if (job.nproc_per_node > 0) params.emplace_back("sgpu.nproc_per_node", std::to_string(job.nproc_per_node));
  for (const auto& [name, value] : job.spec_env) params.emplace_back("sgpu.env." + name, env::mask_secret(name, value));
  return params;
}

std::vector<Metric> end_metrics(const RunEnd& run) {
  auto now = epoch_ms(run.ended);
  std::vector<Metric> metrics = {{"sgpu.wall_time_s", duration_seconds(run.started, run.ended), now, 0},
                                 {"sgpu.exit_code", static_cast<double>(run.exit_code), now, 0}};
  for (const auto& r : run.ranks)
    if (r.pid > 0) metrics.push_back({"sgpu.rank_duration_s", duration_seconds(r.started, r.ended), now, r.rank});
  auto nodes = std::count_if(run.excluded.begin(), run.excluded.end(), [](const Exclusion& e) { return e.gpu < 0; });
  auto gpus = static_cast<std::ptrdiff_t>(run.excluded.size()) - nodes;
  if (gpus > 0) metrics.push_back({"sgpu.excluded_gpus", static_cast<double>(gpus), now, 0});
  if (nodes > 0) metrics.push_back({"sgpu.excluded_nodes", static_cast<double>(nodes), now, 0});  // --spares
  return metrics;
}

KeyValues end_tags(const RunEnd& run) {
  if (run.excluded.empty()) return {};
  std::string lines;
  for (const auto& e : run.excluded) {
    if (!lines.empty()) lines += '\n';
    if (e.gpu < 0) {  // a whole node (--spares)
      lines += fmt::format("{}: {} (attempt {} on)", e.host, e.reason, e.attempt);
      continue;
    }
    lines += e.host.empty() ? fmt::format("GPU {}: {} (attempt {} on)", e.gpu, e.reason, e.attempt)
                            : fmt::format("{} GPU {}: {} (attempt {} on)", e.host, e.gpu, e.reason, e.attempt);
  }
  return {{"sgpu.excluded", lines}};
}

std::string masked_artifact(std::string_view name, std::string text) {
  // summary.json goes as written: its spec is masked where it is made
  // (spec_json), and parsing it again would take ten times its results' size.
  if (name != "spec.json") return text;
  auto doc = nlohmann::ordered_json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return text;
  auto* spec = &doc;
  if (!spec->contains("env") || !(*spec)["env"].is_object()) return text;
  for (auto& [key, value] : (*spec)["env"].items())
    if (value.is_string()) value = env::mask_secret(key, value.get<std::string>());
  auto mask_list = [](nlohmann::ordered_json& list) {
    if (!list.is_array()) return;
    std::vector<std::string> words;
    for (const auto& w : list) words.push_back(w.is_string() ? w.get<std::string>() : w.dump());
    list = env::mask_arguments(words);
  };
  if (spec->contains("argv")) mask_list((*spec)["argv"]);
  if (spec->contains("entrypoint") && (*spec)["entrypoint"].is_object() && (*spec)["entrypoint"].contains("args"))
    mask_list((*spec)["entrypoint"]["args"]);
  return doc.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

std::string git_commit(const std::string& dir) {
  std::error_code absolute_ec;
  auto start = fs::absolute(dir, absolute_ec);
  if (absolute_ec) return "";
  std::error_code ec;  // not found is no error here: look in the parent
  for (fs::path at = start; !at.empty(); at = at.parent_path()) {
    auto dot_git = at / ".git";
    fs::path git_dir;
    if (fs::is_directory(dot_git, ec)) {
      git_dir = dot_git;
    } else if (fs::is_regular_file(dot_git, ec)) {  // a worktree or submodule: "gitdir: <path>"
      auto line = read_first_line(dot_git);
      if (!line.starts_with("gitdir: ")) return "";
      git_dir = fs::path(line.substr(8));
      if (git_dir.is_relative()) git_dir = at / git_dir;
    }
    if (!git_dir.empty()) {
      auto head = read_first_line(git_dir / "HEAD");
      if (is_commit(head)) return head;  // detached
      if (!head.starts_with("ref: ")) return "";
      auto common = read_first_line(git_dir / "commondir");
      fs::path common_dir =
          common.empty() ? git_dir : (fs::path(common).is_relative() ? git_dir / common : fs::path(common));
      auto ref = head.substr(5);
      auto commit = resolve_ref(git_dir, ref);
      return commit.empty() ? resolve_ref(common_dir, ref) : commit;
    }
    if (at == at.root_path()) break;
  }
  return "";
}

std::vector<Metric> sample_metrics(const NodeSample& sample, bool several_nodes, std::int64_t step) {
  std::vector<Metric> out;
  auto at = epoch_ms(sample.time);
  auto add = [&](std::string key, double value) { out.push_back({std::move(key), value, at, step}); };
  // MLflow takes letters, digits, _ - . / and spaces in a key.
  std::string node;
  for (char c : sample.host) node += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  for (const auto& g : sample.gpus) {
    auto prefix =
        several_nodes ? fmt::format("system/{}_gpu_{}_", node, g.index) : fmt::format("system/gpu_{}_", g.index);
    if (g.utilization_percent) add(prefix + "utilization_percentage", *g.utilization_percent);
    if (g.memory_used_bytes) add(prefix + "memory_usage_megabytes", static_cast<double>(*g.memory_used_bytes) / 1e6);
    if (g.memory_used_bytes && g.memory_total_bytes && *g.memory_total_bytes > 0)
      add(prefix + "memory_usage_percentage",
          std::round(static_cast<double>(*g.memory_used_bytes) / static_cast<double>(*g.memory_total_bytes) * 1000) /
              10);
    if (g.power_watts) add(prefix + "power_usage_watts", *g.power_watts);
    if (g.power_watts && g.power_limit_watts && *g.power_limit_watts > 0)
      add(prefix + "power_usage_percentage", std::round(*g.power_watts / *g.power_limit_watts * 1000) / 10);
  }
  for (const auto& r : sample.ranks) {
    auto prefix = fmt::format("system/rank_{}_", r.rank);
    if (r.cpu_percent) add(prefix + "cpu_utilization_percentage", *r.cpu_percent);
    add(prefix + "memory_usage_megabytes", static_cast<double>(r.rss_bytes) / 1e6);
    if (r.step_rate) add(prefix + "step_rate", *r.step_rate);
  }
  return out;
}

}  // namespace sgpu::launcher::mlflow
