#pragma once
// What sgpu records in an MLflow run: tags and params at the start, metrics
// at the end. Pure: built from the job's description and its end.
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/launcher/tracking/mlflow.hpp"
#include "tracking/mlflow_api.hpp"

namespace sgpu::launcher::mlflow {

// sgpu.run_id, sgpu.host, mlflow.user, mlflow.source.name/type,
// mlflow.source.git.commit (when known), mlflow.parentRunId (when nested).
KeyValues run_tags(const RunDescription& job, std::string_view git_commit, std::string_view parent_run_id);

// sgpu.entrypoint, sgpu.args, sgpu.world_size, sgpu.gpus...: the resolved
// spec, prefixed so the job's own params never collide; secrets masked.
KeyValues run_params(const RunDescription& job);

// sgpu.wall_time_s, sgpu.exit_code, and sgpu.rank_duration_s with the rank as its step.
std::vector<Metric> end_metrics(const RunEnd& run);

// With --health-gate exclusions: the tag sgpu.excluded, a line per GPU left
// out ("GPU 1: 2 uncorrectable ECC errors since the driver loaded (attempt 1
// on)", the host first on several nodes), searchable in MLflow as
// tags.`sgpu.excluded`; nothing without one. end_metrics adds
// sgpu.excluded_gpus, their count.
KeyValues end_tags(const RunEnd& run);

std::int64_t epoch_ms(Clock::time_point t);

// A node's sample (--sample-every) as MLflow system metrics, under the names
// MLflow's own monitor uses for GPUs (system/gpu_0_utilization_percentage,
// ..._memory_usage_megabytes, ..._memory_usage_percentage,
// ..._power_usage_watts, ..._power_usage_percentage), so its UI's System
// Metrics tab plots them; with several nodes the node goes into the name
// (system/<host>_gpu_0_...), where MLflow has no label. Each rank's CPU,
// memory and step rate as system/rank_<r>_cpu_utilization_percentage,
// system/rank_<r>_memory_usage_megabytes and system/rank_<r>_step_rate.
// `step`: the sample's number.
std::vector<Metric> sample_metrics(const NodeSample& sample, bool several_nodes, std::int64_t step);

// spec.json as uploaded: its [env] values and arguments masked as the dry
// run masks them (spec_json already did; this holds for any spec.json).
// Anything else, summary.json too (its spec was masked when it was made),
// and text that is not such a document, is returned as it is.
std::string masked_artifact(std::string_view name, std::string text);

// The commit checked out in `dir` or the nearest directory above it that is
// a git work tree (worktrees and packed refs too); "" when there is none.
// Reads .git; runs nothing.
std::string git_commit(const std::string& dir);

}  // namespace sgpu::launcher::mlflow
