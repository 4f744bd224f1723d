#pragma once
// The run directory's record of a job as it happens: every byte each rank
// writes, in ranks/<r>/stdout and ranks/<r>/stderr (the console may filter or
// cut; these never do; written on a thread of their own, FileWriterThread),
// and events.jsonl, an append-only stream of JSON
// lines (run_started, rank_started, rank_exited, teardown, restart,
// attempt_started, run_finished) that a follower (`logs -f`) or a tracker
// (MLflow) can read.
//
// With restarts, each attempt's files move to ranks/<r>/attempt-<k>/ when the
// next attempt starts; the newest attempt's stay in ranks/<r>/ (and are linked
// into its attempt-<k>/ at the end, by keep_last_attempt).
//
// Every event carries "ts" (UTC), "event", and where it concerns a rank
// "rank", "host" and "attempt" (the restart count), so multi-node runs and
// restarts add events without changing the ones here.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <boost/asio/io_context.hpp>

#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/outputs/file_writer_thread.hpp"
#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

// The JSON of one event line, less "ts" (pure; see rank_exited_event's keys in README).
nlohmann::ordered_json rank_exited_event(int rank, const std::string& host, int pid, const env::ExitStatus& status,
                                         bool terminated_by_sgpu, double duration_s, int attempt = 0);
nlohmann::ordered_json teardown_event(const env::JobEnd& cause, int attempt = 0);
// Attempt `attempt` follows the one that ended for `cause`, after `backoff`.
nlohmann::ordered_json restart_event(int attempt, const env::JobEnd& cause, env::Seconds backoff);

// "ranks/<r>/attempt-<k>": where attempt k's files of rank r are kept.
std::string attempt_dir(const std::string& run_dir, int rank, int attempt);

class RunLog : public JobObserver {
 public:
  // Creates the log files and events.jsonl; throws sgpu::Error naming a file it cannot create.
  // `rank_hosts` names each rank's node in a multi-node run; empty: every rank runs on `host`.
  RunLog(boost::asio::io_context& io, const std::string& run_dir, int world_size, std::string host,
         std::vector<std::string> rank_hosts = {});

  void on_rank_started(int rank, int pid) override;
  void on_rank_output(int rank, Stream stream, std::string_view bytes, const BytesOwner& owner) override;
  void on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) override;
  void on_teardown(const env::JobEnd& cause) override;
  void on_signal_before(const env::SignalBefore& signal, Clock::time_point deadline, bool sent) override;
  void on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) override;
  void on_attempt_started(int attempt) override;
  void on_excluded(const Exclusion& e) override;
  void on_nodes_placed(const std::vector<NodePlacement>& nodes) override;  // a spare names the ranks it took
  // The log writer's: the supervisor stops reading while the disk lags.
  std::vector<std::shared_ptr<OutputFlow>> output_flows() override { return {writer_.flow()}; }

  // After a run with restarts: the last attempt's files also in its attempt-<k>/.
  void keep_last_attempt();
  // Every file opened again, at its path: the run directory was made again
  // after it was deleted (the files open until now were deleted with it).
  // Throws sgpu::Error when events.jsonl cannot be created.
  void reopen();
  // Appends one line: `event` with "ts" first.
  void append_event(const nlohmann::ordered_json& event);
  // Files that could not be written in full ("ranks/2/stdout: No space left on device").
  // Waits until every byte read so far is in the logs, creates the logs of
  // ranks that never wrote (empty files: every rank has both), then lists
  // what could not be written.
  std::vector<std::string> write_errors();

 private:
  const std::string& host_of(int rank) const;
  bool runs_here(int rank) const;  // on this node (no host, or this host)

  // The logs nothing was written to, as links to one empty file.
  void create_empty_logs();
  // Moves (or, with `link`, hard-links) every rank's files into attempt-<attempt>/.
  void archive(int attempt, bool link);

  std::string run_dir_;
  std::string host_;
  std::vector<std::string> rank_hosts_;
  int attempt_ = 0;
  std::vector<std::string> archive_errors_;
  std::vector<AppendFile> logs_;  // rank * 2 + stream
  std::vector<Clock::time_point> started_;
  std::vector<int> pids_;
  AppendFile events_;
  FileWriterThread writer_;  // after logs_: it writes to them until it is gone
};

}  // namespace sgpu::launcher
