#include "sgpu/launcher/outputs/summary.hpp"

#include <algorithm>
#include <string_view>
#include <utility>

#include "sgpu/env/command.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/env/secrets.hpp"
#include "sgpu/launcher/io/json_depth.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/outputs/run_log.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"
#include "sgpu/launcher/plan/ray.hpp"
#include "sgpu/launcher/runs/idempotency.hpp"

namespace sgpu::launcher {

namespace {
using json = nlohmann::ordered_json;

json mlflow_json(const std::optional<TrackingLink>& link) {
  return link ? json{{"run_id", link->run_id}, {"url", link->url}} : json(nullptr);
}

json seconds_or_null(const std::optional<env::Seconds>& s) { return s ? json(s->count()) : json(nullptr); }

// Several nodes: how each reached MASTER_ADDR before the start (null on one node).
json routes_json(const LaunchPlan& plan) {
  if (plan.routes.empty()) return nullptr;
  json out = json::array();
  for (const auto& r : plan.routes)
    out.push_back({{"node", r.node},
                   {"interface", r.interface.empty() ? json(nullptr) : json(r.interface)},
                   {"connect_ms", r.connect_ms}});
  return out;
}

json root_cause_json(const std::optional<RootCause>& root_cause, const std::vector<RankReport>& ranks,
                     const env::JobEnd& end) {
  if (!root_cause) return nullptr;
  const auto& c = *root_cause;
  json out = {{"reason", env::job_end_name(c.kind)}, {"message", c.message}};
  out["rank"] = c.rank >= 0 ? json(c.rank) : json(nullptr);
  if (c.rank >= 0 && static_cast<std::size_t>(c.rank) < ranks.size()) {
    const auto& r = ranks[static_cast<std::size_t>(c.rank)];
    out["host"] = r.host;
    out["pid"] = r.pid > 0 ? json(r.pid) : json(nullptr);
    out["exit_code"] = r.status && r.status->code ? json(*r.status->code) : json(nullptr);
    out["signal"] = r.status && r.status->signal ? json(env::signal_name(*r.status->signal)) : json(nullptr);
  }
  if (end.kind == env::JobEnd::Kind::Interrupted) out["signal"] = env::signal_name(end.signal);
  out["details"] = c.details;
  out["source"] = c.source;
  out["source_path"] = c.source_path.empty() ? json(nullptr) : json(c.source_path);
  out["error_file"] = c.record ? c.record->document : json(nullptr);
  return out;
}

// Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF.
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t len = 0;  // bytes in the sequence, and the smallest code point it may encode
    unsigned min = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      min = 0x10000;
    } else {
      return false;
    }
    unsigned cp = c & (0x7Fu >> len);
    if (i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// The nodes an attempt ran on, by node rank (`nodes`, several nodes) or, on
// one node, its ranks' host: a spare that took a lost node's place
// (--spares) shows in the attempts after it.
json attempt_nodes(const std::vector<RankReport>& ranks, const std::vector<std::string>& nodes = {}) {
  if (!nodes.empty()) return nodes;
  json out = json::array();
  std::vector<std::string> seen;
  for (const auto& r : ranks)
    if (std::find(seen.begin(), seen.end(), r.host) == seen.end()) {
      seen.push_back(r.host);
      out.push_back(r.host);
    }
  return out;
}

json attempt_json(int attempt, const env::JobEnd& end, int exit_code, Clock::time_point started,
                  Clock::time_point ended, const json& root_cause, json nodes) {
  return {{"attempt", attempt},          {"status", env::job_end_name(end.kind)},
          {"exit_code", exit_code},      {"started_at", iso_time(started)},
          {"ended_at", iso_time(ended)}, {"duration_s", duration_seconds(started, ended)},
          {"nodes", std::move(nodes)},   {"root_cause", root_cause}};
}
}  // namespace

// `text` (valid JSON) without the whitespace between its tokens, in place.
void compact_json(std::string& text) {
  std::size_t out = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      in_string = escaped || c != '"';
      escaped = !escaped && c == '\\';
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      continue;
    } else {
      in_string = c == '"';
    }
    text[out++] = c;
  }
  text.resize(out);
}

std::string result_json(std::optional<std::string> content) {
  if (!content || json_nesting_depth(*content) > kMaxRankJsonDepth) return "null";
  // Bytes that are not text (a pickle, an image) would reach the JSON as
  // replacement characters, which nobody can decode: the rank's row names
  // the file instead (result_file).
  if (!valid_utf8(*content)) return "null";
  // Checked without building it: a 16 MiB array would take ten times that
  // as nlohmann values.
  if (json::accept(*content)) {
    compact_json(*content);
    return std::move(*content);
  }
  if (!content->empty() && content->back() == '\n') content->pop_back();
  return json(std::move(*content)).dump();
}

json spec_json(const JobSpec& spec, const LaunchPlan& plan) {
  // spec.json and summary.json get copied into tickets like a dry run's
  // output: masked the same way (secret variables, secret options' values).
  json environment = json::object();
  for (const auto& [name, value] : spec.env) environment[name] = env::mask_secret(name, value);
  json gpus = json::array();
  for (const auto& g : plan.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"type", g.type}, {"uuid", g.uuid}});
  json console_ranks = spec.console_ranks.empty() ? json(nullptr) : json(spec.console_ranks);
  return {
      {"entrypoint",
       {{"kind", env::entrypoint_kind_name(spec.entrypoint.kind)},
        {"target", spec.entrypoint.target},
        {"args", env::mask_arguments(spec.entrypoint.args)}}},
      {"name", spec.name.empty() ? json(nullptr) : json(spec.name)},
      {"idempotency_key", spec.idempotency_key.empty() ? json(nullptr) : json(spec.idempotency_key)},
      // As asked for (--gpus, --nproc...): what another launch with the same key must match.
      {"resources", requested_resources(spec)},
      {"executable", plan.executable},
      {"argv", env::mask_arguments(plan.argv)},
      {"cwd", plan.cwd},
      {"world_size", plan.ranks.size()},
      {"nnodes", plan.ranks.empty() ? 1 : plan.ranks.front().place.nnodes},
      {"nproc_per_node", plan.ranks.empty() ? 0 : plan.ranks.front().place.local_world_size},
      {"gpus", gpus},
      {"gpu_type", plan.gpu_type},
      {"gpu_bind", spec.gpu_bind == GpuBind::PerRank ? "per-rank" : "node"},
      {"cpu_bind", cpu_bind_name(spec.cpu_bind)},
      {"master_addr", plan.master_addr.empty() ? "127.0.0.1" : plan.master_addr},
      {"master_port", plan.master_port},
      {"routes", routes_json(plan)},
      {"environment", plan.env_sync ? env_sync_json(*plan.env_sync) : json(nullptr)},
      {"timeout_s", seconds_or_null(plan.timeout)},
      {"grace_s", plan.grace.count()},
      {"hang_timeout_s", seconds_or_null(plan.hang_timeout)},
      {"stop_signal", env::signal_name(plan.stop_signal)},
      {"signal_before", plan.signal_before ? json(env::format_signal_before(*plan.signal_before)) : json(nullptr)},
      {"max_restarts", plan.max_restarts},
      {"restart_backoff_s", plan.restart_backoff.count()},
      {"env", environment},
      {"run_id", plan.run_id},
      {"run_dir", plan.run_dir},
      {"ray", spec.ray ? json{{"dashboard", spec.ray_dashboard},
                              {"metrics", spec.ray_metrics ? json(ray_metrics_path(plan.run_dir)) : json(nullptr)}}
                       : json(nullptr)},
      {"console",
       {{"ranks", console_ranks},
        {"raw", spec.raw_output},
        {"timestamps", spec.timestamps},
        {"output", spec.output_format}}},
  };
}

json excluded_json(const std::vector<Exclusion>& excluded) {
  json out = json::array();
  for (const auto& e : excluded)
    out.push_back({{"host", e.host.empty() ? json(nullptr) : json(e.host)},
                   {"gpu", e.gpu >= 0 ? json(e.gpu) : json(nullptr)},  // null: the whole node (--spares)
                   {"reason", e.reason},
                   {"attempt", e.attempt}});
  return out;
}

json summary_json(const RunReport& report, json spec) {
  json ranks = json::array();
  for (const auto& r : report.ranks) {
    json row = {{"rank", r.rank},
                {"host", r.host},
                {"pid", r.pid > 0 ? json(r.pid) : json(nullptr)},
                {"exit_code", r.status && r.status->code ? json(*r.status->code) : json(nullptr)},
                {"signal", r.status && r.status->signal ? json(env::signal_name(*r.status->signal)) : json(nullptr)},
                {"verdict", rank_verdict_name(r)},
                {"terminated_by_sgpu", r.terminated_by_sgpu},
                {"started_at", r.status ? json(iso_time(r.started)) : json(nullptr)},
                {"ended_at", r.status ? json(iso_time(r.ended)) : json(nullptr)},
                {"duration_s", r.status ? json(duration_seconds(r.started, r.ended)) : json(nullptr)},
                {"result_file", r.result_file.empty() ? json(nullptr) : json(r.result_file)},
                {"stdout", rank_log_path(report.run_dir, r.rank, Stream::Out)},
                {"stderr", rank_log_path(report.run_dir, r.rank, Stream::Err)}};
    if (!r.binding.is_null()) row["binding"] = r.binding;  // --cpu-bind, --report-bindings
    ranks.push_back(std::move(row));
  }
  auto root_cause = root_cause_json(report.root_cause, report.ranks, report.end);
  json attempts = json::array();
  for (const auto& a : report.attempts)
    attempts.push_back(attempt_json(a.attempt, a.end, a.exit_code, a.started, a.ended,
                                    root_cause_json(a.root_cause, a.ranks, a.end), attempt_nodes(a.ranks, a.nodes)));
  // A run that does not restart (or a multi-node one) is its one attempt.
  if (attempts.empty())
    attempts.push_back(attempt_json(0, report.end, report.exit_code, report.started, report.ended, root_cause,
                                    attempt_nodes(report.ranks)));
  // Read before the spec moves into the document; the parts move in, not copied.
  const auto& read = spec;
  json name = read.is_object() && read.contains("name") ? read["name"] : json(nullptr);
  json ray_metrics = read.is_object() && read.contains("ray") && read["ray"].is_object()
                         ? read["ray"].value("metrics", json(nullptr))
                         : json(nullptr);
  return {
      {"version", kSummaryVersion},
      {"run_id", report.run_id},
      {"run_dir", report.run_dir},
      {"name", std::move(name)},
      {"status", env::job_end_name(report.end.kind)},
      {"exit_code", report.exit_code},
      {"timed_out", report.end.kind == env::JobEnd::Kind::TimedOut},
      {"started_at", iso_time(report.started)},
      {"ended_at", iso_time(report.ended)},
      {"duration_s", duration_seconds(report.started, report.ended)},
      {"world_size", report.ranks.size()},
      {"spec", std::move(spec)},
      {"ranks", std::move(ranks)},
      {"results", nullptr},  // summary_text() puts them in
      {"root_cause", std::move(root_cause)},
      {"attempts", std::move(attempts)},
      {"warnings", report.warnings},
      {"excluded", excluded_json(report.excluded)},
      {"signal_before", report.signal_before ? json(signal_before_json(*report.signal_before)) : json(nullptr)},
      // --ray-metrics: where the Ray nodes' resources are, once a second.
      {"ray_metrics", std::move(ray_metrics)},
      {"mlflow", mlflow_json(report.mlflow)},
  };
}

json not_started_json(const std::string& run_id, const std::string& run_dir, const env::JobEnd& end,
                      const std::optional<TrackingLink>& mlflow) {
  auto now = iso_time(Clock::now());
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {
      {"version", kSummaryVersion},
      {"run_id", or_null(run_id)},
      {"run_dir", or_null(run_dir)},
      {"name", nullptr},
      {"status", env::job_end_name(end.kind)},
      {"exit_code", env::job_exit_code(end)},
      {"timed_out", false},
      {"started_at", now},
      {"ended_at", now},
      {"duration_s", 0},
      {"world_size", 0},
      {"spec", nullptr},
      {"ranks", json::array()},
      {"results", json::array()},
      {"root_cause",
       {{"reason", env::job_end_name(end.kind)},
        {"message", end.reason},
        {"rank", nullptr},
        {"details", ""},
        {"source", "sgpu"},
        {"source_path", nullptr},
        {"error_file", nullptr}}},
      {"attempts", json::array()},
      {"warnings", json::array()},
      {"excluded", json::array()},
      {"signal_before", nullptr},
      {"ray_metrics", nullptr},
      {"mlflow", mlflow_json(mlflow)},
  };
}

std::string summary_text(const json& summary, const std::vector<std::string>& results) {
  auto text = dump_json(summary);
  // The one top-level "results" (deeper keys are indented further, and no
  // string holds a raw newline): each rank's result on a line of its own.
  constexpr std::string_view kKey = "\n  \"results\": null";
  auto at = text.find(kKey);
  if (at == std::string::npos) return text;
  std::size_t size = 0;
  for (const auto& r : results) size += r.size() + 6;
  std::string list = "\n  \"results\": [";
  list.reserve(list.size() + size + 4);
  for (std::size_t i = 0; i < results.size(); ++i) {
    list += i == 0 ? "\n    " : ",\n    ";
    list += results[i];
  }
  list += results.empty() ? "]" : "\n  ]";
  text.replace(at, kKey.size(), list);
  return text;
}

std::string dump_json(const json& doc, int indent) {
  return doc.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace sgpu::launcher
