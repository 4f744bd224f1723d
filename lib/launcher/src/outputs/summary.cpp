#include "sgpu/launcher/outputs/summary.hpp"

#include "sgpu/env/command.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/outputs/run_files.hpp"
#include "sgpu/launcher/outputs/run_log.hpp"

namespace sgpu::launcher {

namespace {
using json = nlohmann::ordered_json;

json seconds_or_null(const std::optional<env::Seconds>& s) { return s ? json(s->count()) : json(nullptr); }

json root_cause_json(const RunReport& report) {
  if (!report.root_cause) return nullptr;
  const auto& c = *report.root_cause;
  json out = {{"reason", job_end_name(c.kind)}, {"message", c.message}};
  out["rank"] = c.rank >= 0 ? json(c.rank) : json(nullptr);
  if (c.rank >= 0 && static_cast<std::size_t>(c.rank) < report.ranks.size()) {
    const auto& r = report.ranks[static_cast<std::size_t>(c.rank)];
    out["host"] = r.host;
    out["pid"] = r.pid > 0 ? json(r.pid) : json(nullptr);
    out["exit_code"] = r.status && r.status->code ? json(*r.status->code) : json(nullptr);
    out["signal"] = r.status && r.status->signal ? json(env::signal_name(*r.status->signal)) : json(nullptr);
  }
  if (report.end.kind == env::JobEnd::Kind::Interrupted) out["signal"] = env::signal_name(report.end.signal);
  out["details"] = c.details;
  out["source"] = c.source;
  out["source_path"] = c.source_path.empty() ? json(nullptr) : json(c.source_path);
  out["error_file"] = c.record ? c.record->document : json(nullptr);
  return out;
}
}  // namespace

json parse_result(const std::optional<std::string>& content) {
  if (!content) return nullptr;
  auto doc = json::parse(*content, nullptr, false);
  if (!doc.is_discarded()) return doc;
  std::string text = *content;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

json spec_json(const JobSpec& spec, const LaunchPlan& plan) {
  json gpus = json::array();
  for (const auto& g : plan.gpus)
    gpus.push_back({{"index", g.index}, {"name", g.name}, {"type", g.type}, {"uuid", g.uuid}});
  json console_ranks = spec.console_ranks.empty() ? json(nullptr) : json(spec.console_ranks);
  return {
      {"entrypoint",
       {{"kind", env::entrypoint_kind_name(spec.entrypoint.kind)},
        {"target", spec.entrypoint.target},
        {"args", spec.entrypoint.args}}},
      {"executable", plan.executable},
      {"argv", plan.argv},
      {"cwd", plan.cwd},
      {"world_size", plan.ranks.size()},
      {"nnodes", plan.ranks.empty() ? 1 : plan.ranks.front().place.nnodes},
      {"nproc_per_node", plan.ranks.empty() ? 0 : plan.ranks.front().place.local_world_size},
      {"gpus", gpus},
      {"gpu_type", plan.gpu_type},
      {"gpu_bind", spec.gpu_bind == GpuBind::PerRank ? "per-rank" : "node"},
      {"master_addr", plan.master_addr.empty() ? "127.0.0.1" : plan.master_addr},
      {"master_port", plan.master_port},
      {"timeout_s", seconds_or_null(plan.timeout)},
      {"grace_s", plan.grace.count()},
      {"env", spec.env},
      {"run_id", plan.run_id},
      {"run_dir", plan.run_dir},
      {"console",
       {{"ranks", console_ranks},
        {"raw", spec.raw_output},
        {"timestamps", spec.timestamps},
        {"output", spec.output_format}}},
  };
}

json summary_json(const RunReport& report, const json& spec) {
  json ranks = json::array();
  json results = json::array();
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
                {"result", r.result},
                {"stdout", rank_log_path(report.run_dir, r.rank, Stream::Out)},
                {"stderr", rank_log_path(report.run_dir, r.rank, Stream::Err)}};
    ranks.push_back(std::move(row));
    results.push_back(r.result);
  }
  return {
      {"version", kSummaryVersion},
      {"run_id", report.run_id},
      {"run_dir", report.run_dir},
      {"status", job_end_name(report.end.kind)},
      {"exit_code", report.exit_code},
      {"timed_out", report.end.kind == env::JobEnd::Kind::TimedOut},
      {"started_at", iso_time(report.started)},
      {"ended_at", iso_time(report.ended)},
      {"duration_s", duration_seconds(report.started, report.ended)},
      {"world_size", report.ranks.size()},
      {"spec", spec},
      {"ranks", ranks},
      {"results", results},
      {"root_cause", root_cause_json(report)},
      {"warnings", report.warnings},
      {"mlflow", report.mlflow ? nlohmann::ordered_json{{"run_id", report.mlflow->run_id}, {"url", report.mlflow->url}}
                               : nlohmann::ordered_json(nullptr)},
  };
}

std::string dump_json(const json& doc, int indent) {
  return doc.dump(indent, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace sgpu::launcher
