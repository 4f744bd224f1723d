#pragma once
// Runs one node's ranks to the end on one Asio event loop: exits (pidfd),
// output pipes, signals, the job timeout and the teardown grace timer. The
// first failure, the timeout or a signal tears every rank down: the stop
// signal (SIGTERM, or the SIGINT/SIGHUP received) to each rank's own process,
// so that what it started (DataLoader workers) lives while it checkpoints,
// and SIGKILL to its whole process group after the grace. Every rank gets
// SGPU_DEADLINE, the run's end as UNIX time, when there is one.
// With restarts, once a failed attempt's teardown is over and JobControl says
// so, it starts the whole group again with the launches `relaunch` gives.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/job_control.hpp"
#include "sgpu/launcher/process/rank_process.hpp"

namespace sgpu::launcher {

// A rank running now: who to point a stack reader at.
struct RunningRank {
  int rank = 0;
  int pid = 0;
  std::string heartbeat{};  // its $SGPU_HEARTBEAT_FILE, if it has one
};

struct SupervisorOptions {
  // The job-ending policy's settings (the timeout, the grace, signals, the
  // hang timeout, restarts): the supervisor's JobControl takes them as they
  // are, except max_restarts, which needs `relaunch`.
  JobControlOptions control{};
  // --max-restarts: `relaunch(k)` gives attempt k's ranks (a new MASTER_PORT,
  // TORCHELASTIC_RESTART_COUNT=k). Without it there are no restarts. None
  // (empty): no attempt can start (the caller said why, e.g. no healthy GPU
  // is left); the run ends with the last attempt's end.
  std::function<std::vector<RankLaunch>(int attempt)> relaunch{};
  // Before a hang or the timeout ends the job: takes the running ranks'
  // stacks, shows them, answers the verdict (lib/launcher's stacks/ does it;
  // this layer only knows processes). Unset: the job ends at once.
  std::function<void(const env::JobEnd& why, std::vector<RunningRank> ranks, std::function<void(std::string)> done)>
      inspect{};
  // Once, on the loop, when the run is over (before run() returns).
  std::function<void()> on_end{};
};

struct RankRecord {
  int rank = 0;
  int pid = -1;
  std::optional<env::ExitStatus> status;
  bool terminated_by_sgpu = false;
  Clock::time_point started{};
  Clock::time_point ended{};
  std::string host{};  // multi-node: the node it ran on in this attempt (a spare's after a replacement); "": the plan's
};

// One attempt of a run (there is one without restarts).
struct AttemptOutcome {
  int attempt = 0;
  env::JobEnd end;  // how this attempt ended
  int exit_code() const { return env::job_exit_code(end); }
  std::vector<RankRecord> ranks;
  Clock::time_point started{};
  Clock::time_point ended{};
  std::string spawn_error;
  std::vector<std::string> nodes{};  // multi-node: each node rank's host in this attempt; empty on one node
};

struct JobOutcome {
  // The run's end: the last attempt's, or what ended the run during a backoff.
  env::JobEnd end;
  // sgpu's exit code: always derived from the recorded end, never stored.
  int exit_code() const { return env::job_exit_code(end); }
  std::vector<RankRecord> ranks;
  Clock::time_point started{};
  Clock::time_point ended{};
  std::string spawn_error;  // for JobEnd::Kind::SpawnFailed: what could not be started
  // Every attempt in order, the last one's ranks also in `ranks`; empty from
  // callers that do not restart (a multi-node run): one attempt, the run itself.
  std::vector<AttemptOutcome> attempts;
  std::vector<Exclusion> excluded;  // --health-gate: the GPUs it left out, in order
};

class Supervisor {
 public:
  Supervisor(boost::asio::io_context& io, JobObserver& observer, SupervisorOptions options);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts every rank and runs the event loop until all have exited and all
  // their output is read.
  JobOutcome run(const std::vector<RankLaunch>& launches);

  // The same without running the loop: for callers that share it (the node
  // agent). `on_finished` is posted to the loop once every rank has exited
  // and all output is read.
  void start(const std::vector<RankLaunch>& launches, std::function<void(const JobOutcome&)> on_finished);
  // Tears the job down for `cause`: `sig` to every rank now, SIGKILL after
  // the grace. Only the first cause counts.
  void stop(const env::JobEnd& cause, int sig);
  // Passes `sig` to every running rank as it is (SIGUSR1 for a checkpoint).
  void forward(int sig);
  // SIGKILL to every rank now.
  void kill();
  // The ranks of the current attempt still running.
  std::vector<RunningRank> running_ranks() const;
  // How long ago any rank last made progress: output, or a touch of its
  // heartbeat file.
  env::Seconds progress_age() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sgpu::launcher
