#pragma once
// The machine-readable side of a run: the resolved spec (spec.json) and the
// summary document, which is both summary.json and what `-o json` prints.
// Pure: builds JSON, writes nothing. The schema is in README "Summary".
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/launcher/outputs/report.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

// 2: each result once (`results`), no longer also in ranks[].result.
inline constexpr int kSummaryVersion = 2;

// A rank's $SGPU_RESULT_FILE as JSON text: its JSON, compacted (no
// whitespace between tokens), when it is valid JSON, else the text (less one
// trailing newline) as a JSON string; "null" when the rank wrote none,
// nested it deeper than kMaxRankJsonDepth, or wrote bytes that are not UTF-8
// text (a pickle): the summary's result_file names those. Builds no JSON
// values, so it takes little more memory than the text.
std::string result_json(std::optional<std::string> content);

// The job as it was run: entrypoint, argv, ranks, GPUs, port, limits, console options.
nlohmann::ordered_json spec_json(const JobSpec& spec, const LaunchPlan& plan);

// The summary document but for its `results` (null in it): summary_text()
// puts them in.
nlohmann::ordered_json summary_json(const RunReport& report, nlohmann::ordered_json spec);

// The summary as written (summary.json, -o json): `summary` (summary_json())
// indented, with `results` (report.results) spliced in, one rank's per line.
std::string summary_text(const nlohmann::ordered_json& summary, const std::vector<std::string>& results);

// The summary of a run that could not start (end.kind NotStarted): the same
// keys, no ranks; run_id and run_dir null when none was made; `mlflow`, the
// MLflow run it ended (FAILED), when it was tracked.
nlohmann::ordered_json not_started_json(const std::string& run_id, const std::string& run_dir, const env::JobEnd& end,
                                        const std::optional<TrackingLink>& mlflow = std::nullopt);

// JSON text that survives any bytes a rank wrote (invalid UTF-8 replaced).
std::string dump_json(const nlohmann::ordered_json& doc, int indent = 2);

}  // namespace sgpu::launcher
