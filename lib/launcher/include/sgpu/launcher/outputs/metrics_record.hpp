#pragma once
// What the launcher keeps of the nodes' samples (--sample-every): each one
// appended to <run>/metrics.jsonl, the newest per rank and per GPU for
// Prometheus (metrics_server.hpp), and the stragglers, each warned of once
// (a console line and a "straggler" event).
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/metrics/sampling.hpp"
#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

// The job as /metrics shows it: the newest sample of each rank and GPU, and
// what the events said.
struct MetricsState {
  std::string run_id;
  std::string state = "running";
  int attempt = 0;
  int world_size = 0;
  std::string here;                                       // this node's name: the node label of ranks with no host
  std::vector<std::string> rank_hosts;                    // by rank; "" on this node
  std::map<int, RankSample> ranks;                        // the newest sample of each
  std::map<std::pair<std::string, int>, GpuSample> gpus;  // (host, index)
  std::vector<std::uint64_t> output_bytes;                // by rank
  std::vector<bool> running;                              // by rank
  std::vector<bool> stragglers;                           // by rank, this attempt
  Clock::time_point last_progress{};                      // newest output or heartbeat of any rank
};

// Prometheus' text exposition format (version 0.0.4) of `state` at `now`.
std::string prometheus_text(const MetricsState& state, Clock::time_point now);

// One metrics.jsonl line per rank and per GPU of a sample; a rank's line
// says whether it is a straggler this attempt (`stragglers`, by rank).
std::vector<nlohmann::ordered_json> sample_lines(const NodeSample& sample, const std::vector<bool>& stragglers);

class MetricsRecorder : public JobObserver {
 public:
  // `warn` prints a warning line on the console; `event` appends to events.jsonl.
  // `rank_hosts`: each rank's node, "" for this one (`here`).
  MetricsRecorder(const std::string& run_dir, std::string run_id, std::string here, std::vector<std::string> rank_hosts,
                  double straggler_factor, std::function<void(const std::string&)> warn,
                  std::function<void(const nlohmann::ordered_json&)> event);

  void on_rank_started(int rank, int pid) override;
  void on_rank_output(int rank, Stream stream, std::string_view bytes, const BytesOwner& owner) override;
  void on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) override;
  void on_attempt_started(int attempt) override;
  void on_sample(const NodeSample& sample) override;
  void on_nodes_placed(const std::vector<NodePlacement>& nodes) override;  // a spare names the ranks it took

  const MetricsState& state() const { return state_; }
  void set_state(std::string state) { state_.state = std::move(state); }
  // metrics.jsonl's write error, if one happened ("" none).
  const std::string& write_error() const { return file_.error(); }

 private:
  void note_stragglers(const std::vector<metrics::Straggler>& found);

  MetricsState state_;
  AppendFile file_;
  std::optional<metrics::StragglerDetector> stragglers_;
  double factor_;
  std::function<void(const std::string&)> warn_;
  std::function<void(const nlohmann::ordered_json&)> event_;
};

}  // namespace sgpu::launcher
