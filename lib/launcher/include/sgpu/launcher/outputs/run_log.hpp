#pragma once
// The run directory's record of a job as it happens: every byte each rank
// writes, in ranks/<r>/stdout and ranks/<r>/stderr (the console may filter or
// cut; these never do), and events.jsonl, an append-only stream of JSON
// lines (run_started, rank_started, rank_exited, teardown, run_finished) that
// a follower (`logs -f`), a tracker (MLflow) or a restart loop can read.
//
// Every event carries "ts" (UTC), "event", and where it concerns a rank
// "rank", "host" and "attempt" (the restart count), so multi-node runs and
// restarts add events without changing the ones here.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sgpu/launcher/outputs/run_files.hpp"
#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

// The JSON of one event line, less "ts" (pure; see rank_exited_event's keys in README).
nlohmann::ordered_json rank_exited_event(int rank, const std::string& host, int pid, const env::ExitStatus& status,
                                         bool terminated_by_sgpu, double duration_s);
nlohmann::ordered_json teardown_event(const env::JobEnd& cause);

class RunLog : public JobObserver {
 public:
  // Creates the log files and events.jsonl; throws sgpu::Error naming a file it cannot create.
  // `rank_hosts` names each rank's node in a multi-node run; empty: every rank runs on `host`.
  RunLog(const std::string& run_dir, int world_size, std::string host, std::vector<std::string> rank_hosts = {});

  void on_rank_started(int rank, int pid) override;
  void on_rank_output(int rank, Stream stream, std::string_view bytes) override;
  void on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) override;
  void on_teardown(const env::JobEnd& cause) override;

  // Appends one line: `event` with "ts" first.
  void append_event(const nlohmann::ordered_json& event);
  // Files that could not be written in full ("ranks/2/stdout: No space left on device").
  // Creates the logs of ranks that never wrote (empty files: every rank has
  // both), then lists what could not be written.
  std::vector<std::string> write_errors();

 private:
  const std::string& host_of(int rank) const;

  std::string host_;
  std::vector<std::string> rank_hosts_;
  std::vector<AppendFile> logs_;  // rank * 2 + stream
  std::vector<Clock::time_point> started_;
  std::vector<int> pids_;
  AppendFile events_;
};

}  // namespace sgpu::launcher
