// The tracker's inputs: MlflowConfig from the spec and MLflow's variables,
// and what the job and its end say (RunDescription, RunEnd).
#include <pwd.h>
#include <unistd.h>
#include <climits>
#include <filesystem>

#include <fmt/format.h>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/env/secrets.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/tracking/mlflow.hpp"
#include "tracking/mlflow_api.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

namespace {

std::string get(const env::Environment& e, const char* name) {
  auto it = e.find(name);
  return it == e.end() ? std::string() : it->second;
}

bool truthy(std::string_view v) { return v == "true" || v == "True" || v == "TRUE" || v == "1"; }

std::string user_name(const env::Environment& e) {
  if (auto u = get(e, "USER"); !u.empty()) return u;
  if (const auto* pw = ::getpwuid(::getuid()); pw != nullptr) return pw->pw_name;
  return "unknown";
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

std::optional<MlflowConfig> mlflow_config(const JobSpec& spec, const env::Environment& sgpu_env,
                                          std::vector<std::string>& warnings) {
  const auto& m = spec.mlflow;
  if (!m.enabled || m.uri.empty()) return std::nullopt;
  if (!mlflow::parse_server_url(m.uri)) {
    auto shown = env::mask_secret("MLFLOW_TRACKING_URI", m.uri);
    auto origin = spec.origins.find("mlflow.uri");
    bool from_variable = origin == spec.origins.end() || origin->second.starts_with("MLFLOW_TRACKING_URI");
    if (!from_variable)
      throw Error(
          fmt::format("{}: '{}' is not an MLflow tracking server; give its http:// or https:// URL "
                      "(http://127.0.0.1:5000), or --no-mlflow",
                      where_set(spec, "mlflow.uri", "--mlflow"), shown));
    warnings.push_back(
        fmt::format("MLFLOW_TRACKING_URI={} is not an http(s) server, which is all sgpu tracks "
                    "runs on: this launch is not tracked (--no-mlflow says so quietly)",
                    shown));
    return std::nullopt;
  }
  MlflowConfig c;
  c.uri = m.uri;
  c.experiment_name = m.experiment;
  c.experiment_id = m.experiment_id;
  c.run_name = m.run_name.empty() ? spec.name : m.run_name;  // "" still: the sgpu run id
  c.parent_run_id = get(sgpu_env, "MLFLOW_RUN_ID");
  c.token = get(sgpu_env, "MLFLOW_TRACKING_TOKEN");
  c.username = get(sgpu_env, "MLFLOW_TRACKING_USERNAME");
  c.password = get(sgpu_env, "MLFLOW_TRACKING_PASSWORD");
  c.insecure_tls = truthy(get(sgpu_env, "MLFLOW_TRACKING_INSECURE_TLS"));
  c.ca_file = get(sgpu_env, "MLFLOW_TRACKING_SERVER_CERT_PATH");
  auto timeout = m.timeout.limit().value_or(env::Seconds(5));
  c.timeout = std::chrono::milliseconds(static_cast<long long>(timeout.count() * 1000));
  return c;
}

RunDescription describe_run(const JobSpec& spec, const LaunchPlan& plan, const env::Environment& sgpu_env) {
  RunDescription d;
  d.sgpu_run_id = plan.run_id;
  d.host = host_name();
  d.user = user_name(sgpu_env);
  d.cwd = plan.cwd;
  d.entrypoint = spec.entrypoint;
  d.backend = spec.backend;
  d.world_size = plan.ranks.empty() ? 0 : plan.ranks.front().place.world_size;
  d.nnodes = plan.ranks.empty() ? spec.nodes : plan.ranks.front().place.nnodes;
  d.nproc_per_node = plan.ranks.empty() ? 0 : plan.ranks.front().place.local_world_size;
  d.gpus = static_cast<int>(plan.gpus.size());
  d.gpu_type = plan.gpu_type;
  d.timeout = plan.timeout ? env::format_duration(*plan.timeout) : "none";
  d.spec_env = spec.env;
  return d;
}

RunEnd describe_not_started(int exit_code) {
  RunEnd r;
  r.end = env::JobEnd::Kind::NotStarted;
  r.exit_code = exit_code;
  r.started = r.ended = Clock::now();
  return r;
}

RunEnd describe_end(const JobOutcome& outcome, const LaunchPlan& plan) {
  RunEnd r;
  r.end = outcome.end.kind;
  r.exit_code = outcome.exit_code();
  r.started = outcome.started;
  r.ended = outcome.ended;
  r.ranks = outcome.ranks;
  r.excluded = outcome.excluded;
  auto dir = fs::path(plan.run_dir);
  r.artifacts.emplace_back((dir / "summary.json").string(), "summary.json");
  for (const char* name : {"spec.json", "events.jsonl"}) {  // what the summary also says
    r.artifacts.emplace_back((dir / name).string(), name);
    r.detail_artifacts.emplace_back(name);
  }
  auto add_rank = [&](int rank, bool error_file) {
    auto in_run = [rank](const char* file) { return fmt::format("ranks/{}/{}", rank, file); };
    if (error_file && static_cast<std::size_t>(rank) < plan.ranks.size())
      r.artifacts.emplace_back(plan.ranks[static_cast<std::size_t>(rank)].files.error_file, in_run("error.json"));
    r.artifacts.emplace_back(rank_log_path(plan.run_dir, rank, Stream::Out), in_run("stdout"));
    r.artifacts.emplace_back(rank_log_path(plan.run_dir, rank, Stream::Err), in_run("stderr"));
  };
  int failed = outcome.end.kind == env::JobEnd::Kind::RankFailed ? outcome.end.rank : -1;
  if (!plan.ranks.empty()) add_rank(0, failed == 0);
  if (failed > 0) add_rank(failed, true);
  return r;
}

}  // namespace sgpu::launcher
