#include "engine/keyed_launch.hpp"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/outputs/summary.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/runs/follow.hpp"

namespace sgpu::launcher {
namespace {
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;
constexpr std::size_t kSpecLimit = 16 << 20;
constexpr std::size_t kSummaryLimit = 64 << 20;

std::string file_in(const RunInfo& run, const char* name) { return (std::filesystem::path(run.dir) / name).string(); }

// Refused (2) when the run with the key ran other work: a key never stands for two jobs.
void check_same_work(const RunInfo& run, const JobSpec& spec) {
  auto text = read_file(file_in(run, "spec.json"), kSpecLimit);
  auto recorded = text ? json::parse(*text, nullptr, false) : json();
  auto differences = work_differences(recorded, work_identity(spec));
  if (differences.empty()) return;
  std::string listed;
  for (const auto& d : differences) listed += "\n  " + d;
  throw Error(
      fmt::format("--idempotency-key {}: run {} ({}) has this key and ran other work:{}\ngive another key, or "
                  "--force-new to start a new run under this one",
                  spec.idempotency_key, run.id, run_state_name(run.state), listed));
}

// The run's summary.json (as `-o json` printed it) with "reused": true;
// for a run still going, or one without a readable summary, `sgpu status -o json`'s fields.
ordered_json reused_document(const RunInfo& run) {
  ordered_json doc;
  if (run.state != RunState::Running)
    if (auto text = read_file(file_in(run, "summary.json"), kSummaryLimit))
      doc = ordered_json::parse(*text, nullptr, false);
  if (!doc.is_object()) doc = run_json(run);
  if (!doc.contains("name")) doc["name"] = run.record.contains("name") ? run.record["name"] : json(nullptr);
  doc["reused"] = true;
  return doc;
}

// --detach: the run's id, as a new detached run's would be printed.
int print_reused_id(const RunInfo& run, const JobSpec& spec) {
  diagnostic("sgpu: --idempotency-key {}: run {} {}; no new run started\n", spec.idempotency_key, run.id,
             run.state == RunState::Running ? "is running" : "already succeeded");
  if (spec.output_format != "json") {
    output(run.id + "\n");
    return 0;
  }
  ordered_json doc{{"run_id", run.id}, {"run_dir", run.dir}};
  doc["name"] = run.record.contains("name") ? run.record["name"] : json(nullptr);
  doc["state"] = run_state_name(run.state);
  doc["reused"] = true;
  output(dump_json(doc));
  return 0;
}

// Attached, a run that already succeeded: its end, and nothing starts.
int print_reused_end(const RunInfo& run, const JobSpec& spec) {
  diagnostic(
      "sgpu: --idempotency-key {}: run {} already succeeded (exit code 0); nothing started (--force-new "
      "starts a new run)\n",
      spec.idempotency_key, run.id);
  if (spec.output_format == "json") output(dump_json(reused_document(run)));
  return 0;
}

// Attached, a running run: its output as `sgpu logs -f` shows it, then its end and exit code.
int follow_reused(const RunInfo& run, const JobSpec& spec, const std::string& root) {
  diagnostic("sgpu: --idempotency-key {}: run {} is running; following it (as sgpu logs -f {})\n", spec.idempotency_key,
             run.id, run.id);
  LogOptions options;
  options.follow = true;
  options.stdout_to_stderr = spec.output_format == "json";  // stdout carries the summary alone
  int code = print_logs(run, options);
  auto ended = read_run(root, run.id).value_or(run);
  if (spec.output_format == "json")
    output(dump_json(reused_document(ended)));
  else
    diagnostic("sgpu: run {} {} (exit code {})\n", run.id, run_state_name(ended.state), code);
  return code;
}
}  // namespace

std::optional<int> answer_from_keyed_run(const LaunchContext& ctx, bool force_new, std::optional<KeyLock>& lock) {
  const auto& spec = ctx.spec;
  // Only the node that hosts the run decides; the others join whatever it starts.
  if (spec.idempotency_key.empty() || (spec.rendezvous.node_rank && *spec.rendezvous.node_rank > 0))
    return std::nullopt;
  auto root = runs_root(spec.log_dir, ctx.inherited);
  lock.emplace(root, spec.idempotency_key, [&] {
    // A multi-node launch holds it until its nodes joined, a SLURM one until its allocation.
    diagnostic("sgpu: --idempotency-key {}: another launch with this key is starting its run; waiting for it\n",
               spec.idempotency_key);
  });
  if (force_new) return std::nullopt;
  auto run = newest_run_with_key(root, spec.idempotency_key);
  if (!run) return std::nullopt;
  check_same_work(*run, spec);
  auto action = key_action(run->state);
  if (action == KeyAction::Start) return std::nullopt;
  if (action == KeyAction::Refuse)
    throw Error(fmt::format("--idempotency-key {}: run {} has this key but cannot be read ({}); whether it runs is "
                            "unknown, so no second run starts: see `sgpu status {}`, or pass --force-new",
                            spec.idempotency_key, run->id, run->problem, run->id),
                1);
  lock.reset();  // no new run will record the key
  if (spec.detach) return print_reused_id(*run, spec);
  if (action == KeyAction::Reuse) return print_reused_end(*run, spec);
  return follow_reused(*run, spec, root);
}

}  // namespace sgpu::launcher
