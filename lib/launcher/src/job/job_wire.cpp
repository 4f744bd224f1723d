#include "sgpu/launcher/job/job_wire.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace {

using json = nlohmann::json;
constexpr int kFormat = 1;

env::Entrypoint::Kind kind_of(const std::string& name) {
  if (name == "module") return env::Entrypoint::Kind::Module;
  if (name == "executable") return env::Entrypoint::Kind::Executable;
  if (name == "script") return env::Entrypoint::Kind::Script;
  throw Error(fmt::format("unknown entrypoint kind '{}'", name), 1);
}

template <typename T>
void take(const json& j, const char* key, T& out) {
  if (auto it = j.find(key); it != j.end() && !it->is_null()) out = it->get<T>();
}

// A duration is read as the launcher wrote it, and parsed here, once.
void take(const json& j, const char* key, env::Duration& out) {
  if (auto it = j.find(key); it != j.end() && !it->is_null())
    out = env::Duration(it->get<std::string>(), fmt::format("the job's {}", key));
}

template <typename T>
void take(const json& j, const char* key, std::optional<T>& out) {
  if (auto it = j.find(key); it != j.end() && !it->is_null()) out = it->get<T>();
}

}  // namespace

std::string encode_job(const JobDescription& job) {
  const auto& s = job.spec;
  json j;
  j["format"] = kFormat;
  j["entrypoint"] = {{"kind", env::entrypoint_kind_name(s.entrypoint.kind)},
                     {"target", s.entrypoint.target},
                     {"args", s.entrypoint.args}};
  j["python"] = s.python;
  j["gpus"] = s.gpus ? json(*s.gpus) : json();
  // --gpus-per-node: an agent on a node with more GPUs runs that many ranks,
  // not one per GPU it has (the rest are its spares for the health gate).
  j["gpus_per_node"] = s.gpus_per_node ? json(*s.gpus_per_node) : json();
  j["nproc"] = s.nproc ? json(*s.nproc) : json();
  j["nproc_mode"] = s.nproc_mode;  // torchrun's gpu/auto/cpu: each agent resolves it on its node
  j["gpu_type"] = s.gpu_type;
  j["gpu_bind"] = s.gpu_bind == GpuBind::PerRank ? "per-rank" : "node";
  j["cpu_bind"] = cpu_bind_name(s.cpu_bind);  // each agent binds its ranks with its own node's topology
  j["report_bindings"] = s.report_bindings;
  j["master_port"] = s.master_port ? json(*s.master_port) : json();
  j["timeout"] = s.timeout.text();
  j["grace"] = s.grace.text();
  j["hang_timeout"] = s.hang_timeout.text();
  j["sample_every"] = s.sample_every.text();  // each agent samples its own ranks and GPUs
  j["stop_signal"] = s.stop_signal;           // each agent stops its own ranks with it
  j["signal_before"] = s.signal_before ? json(env::format_signal_before(*s.signal_before)) : json();
  j["log_dir"] = s.log_dir;
  j["env"] = s.env;
  j["cwd"] = job.cwd;
  j["added_env"] = job.added_env;
  j["end_by"] = job.end_by ? json(*job.end_by) : json();
  j["ray"] = s.ray;  // --ray: every agent runs the Ray node helper instead of ranks
  j["ray_dashboard"] = s.ray_dashboard;
  j["ray_metrics"] = s.ray_metrics;
  j["health_gate"] = s.health_gate;    // every agent gates its own GPUs before each attempt
  j["max_restarts"] = s.max_restarts;  // with restarts, each watches its GPUs' XIDs between attempts
  const auto& pf = s.preflight;        // every node checks its GPUs before Ready
  j["preflight"] = {{"enabled", pf.enabled},
                    {"max_bytes", pf.max_bytes},
                    {"iters", pf.iters},
                    {"timeout", pf.timeout.text()},
                    {"expect_busbw", pf.expect_busbw}};
  return j.dump();
}

JobDescription decode_job(std::string_view text) {
  JobDescription job;
  try {
    auto j = json::parse(text);
    int format = 0;
    take(j, "format", format);
    if (format != kFormat)
      throw Error(
          fmt::format("job description format {} (this agent reads {}): run the same sgpu version on every node",
                      format, kFormat),
          kExitUsage);
    auto& s = job.spec;
    const auto& e = j.at("entrypoint");
    s.entrypoint.kind = kind_of(e.at("kind").get<std::string>());
    s.entrypoint.target = e.at("target").get<std::string>();
    take(e, "args", s.entrypoint.args);
    take(j, "python", s.python);
    take(j, "gpus", s.gpus);
    take(j, "nproc", s.nproc);
    take(j, "nproc_mode", s.nproc_mode);
    take(j, "gpu_type", s.gpu_type);
    std::string bind = "node";
    take(j, "gpu_bind", bind);
    s.gpu_bind = bind == "per-rank" ? GpuBind::PerRank : GpuBind::Node;
    std::string cpu_bind = "none";
    take(j, "cpu_bind", cpu_bind);
    s.cpu_bind = parse_cpu_bind(cpu_bind).value_or(CpuBind::None);
    take(j, "report_bindings", s.report_bindings);
    take(j, "master_port", s.master_port);
    take(j, "timeout", s.timeout);
    take(j, "grace", s.grace);
    take(j, "hang_timeout", s.hang_timeout);
    take(j, "sample_every", s.sample_every);
    take(j, "stop_signal", s.stop_signal);
    std::string signal_before;
    take(j, "signal_before", signal_before);
    s.signal_before = env::parse_signal_before(signal_before, "the job's signal_before");
    take(j, "log_dir", s.log_dir);
    take(j, "env", s.env);
    take(j, "cwd", job.cwd);
    take(j, "added_env", job.added_env);
    take(j, "end_by", job.end_by);
    take(j, "ray", s.ray);
    take(j, "ray_dashboard", s.ray_dashboard);
    take(j, "ray_metrics", s.ray_metrics);
    take(j, "health_gate", s.health_gate);
    take(j, "gpus_per_node", s.gpus_per_node);
    take(j, "max_restarts", s.max_restarts);
    if (auto pf = j.find("preflight"); pf != j.end()) {
      take(*pf, "enabled", s.preflight.enabled);
      take(*pf, "max_bytes", s.preflight.max_bytes);
      take(*pf, "iters", s.preflight.iters);
      take(*pf, "timeout", s.preflight.timeout);
      take(*pf, "expect_busbw", s.preflight.expect_busbw);
    }
  } catch (const json::exception& e) {
    throw Error(fmt::format("the launcher sent a job this agent cannot read: {}", e.what()), 1);
  }
  return job;
}

namespace {
template <class T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json();
}
}  // namespace

std::string encode_samples(const NodeSample& sample) {
  json j;
  j["time_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(sample.time.time_since_epoch()).count();
  j["node"] = sample.node;
  j["host"] = sample.host;
  j["ranks"] = json::array();
  for (const auto& r : sample.ranks)
    j["ranks"].push_back({{"rank", r.rank},
                          {"pid", r.pid},
                          {"cpu_percent", opt(r.cpu_percent)},
                          {"rss_bytes", r.rss_bytes},
                          {"threads", r.threads},
                          {"state", std::string(1, r.state)},
                          {"step", opt(r.step)},
                          {"step_rate", opt(r.step_rate)},
                          {"progress_age_s", opt(r.progress_age_s)}});
  j["gpus"] = json::array();
  for (const auto& g : sample.gpus)
    j["gpus"].push_back({{"index", g.index},
                         {"uuid", g.uuid},
                         {"utilization_percent", opt(g.utilization_percent)},
                         {"memory_utilization_percent", opt(g.memory_utilization_percent)},
                         {"memory_used_bytes", opt(g.memory_used_bytes)},
                         {"memory_total_bytes", opt(g.memory_total_bytes)},
                         {"power_watts", opt(g.power_watts)},
                         {"power_limit_watts", opt(g.power_limit_watts)},
                         {"temperature_c", opt(g.temperature_c)},
                         {"sm_clock_mhz", opt(g.sm_clock_mhz)},
                         {"throttle_reasons", opt(g.throttle_reasons)},
                         {"ranks_memory_bytes", opt(g.ranks_memory_bytes)},
                         {"ranks", g.ranks}});
  return j.dump();
}

std::optional<NodeSample> decode_samples(std::string_view text) {
  try {
    auto j = json::parse(text);
    NodeSample s;
    long long ms = 0;
    take(j, "time_ms", ms);
    using SystemClock = std::chrono::system_clock;
    s.time = SystemClock::time_point(std::chrono::duration_cast<SystemClock::duration>(std::chrono::milliseconds(ms)));
    take(j, "node", s.node);
    take(j, "host", s.host);
    for (const auto& r : j.at("ranks")) {
      RankSample rs;
      take(r, "rank", rs.rank);
      take(r, "pid", rs.pid);
      take(r, "cpu_percent", rs.cpu_percent);
      take(r, "rss_bytes", rs.rss_bytes);
      take(r, "threads", rs.threads);
      std::string state = "?";
      take(r, "state", state);
      rs.state = state.empty() ? '?' : state[0];
      take(r, "step", rs.step);
      take(r, "step_rate", rs.step_rate);
      take(r, "progress_age_s", rs.progress_age_s);
      s.ranks.push_back(rs);
    }
    for (const auto& g : j.at("gpus")) {
      GpuSample gs;
      take(g, "index", gs.index);
      take(g, "uuid", gs.uuid);
      take(g, "utilization_percent", gs.utilization_percent);
      take(g, "memory_utilization_percent", gs.memory_utilization_percent);
      take(g, "memory_used_bytes", gs.memory_used_bytes);
      take(g, "memory_total_bytes", gs.memory_total_bytes);
      take(g, "power_watts", gs.power_watts);
      take(g, "power_limit_watts", gs.power_limit_watts);
      take(g, "temperature_c", gs.temperature_c);
      take(g, "sm_clock_mhz", gs.sm_clock_mhz);
      take(g, "throttle_reasons", gs.throttle_reasons);
      take(g, "ranks_memory_bytes", gs.ranks_memory_bytes);
      take(g, "ranks", gs.ranks);
      s.gpus.push_back(std::move(gs));
    }
    return s;
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

}  // namespace sgpu::launcher
