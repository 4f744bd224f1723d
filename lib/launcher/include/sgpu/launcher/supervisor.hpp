#pragma once
// Runs one node's ranks to the end on one Asio event loop: exits (pidfd),
// output pipes, signals, the job timeout and the teardown grace timer. The
// first failure, the timeout or a signal tears every rank down: SIGTERM (or
// the signal received) to each rank's process group, SIGKILL after the grace.
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/events.hpp"
#include "sgpu/launcher/rank_process.hpp"

namespace sgpu::launcher {

struct SupervisorOptions {
  std::optional<env::Seconds> timeout;  // nullopt: no limit
  env::Seconds grace{30};
};

struct RankRecord {
  int rank = 0;
  int pid = -1;
  std::optional<env::ExitStatus> status;
  bool terminated_by_sgpu = false;
  Clock::time_point started{};
  Clock::time_point ended{};
};

struct JobOutcome {
  env::JobEnd end;
  int exit_code = 0;
  std::vector<RankRecord> ranks;
  Clock::time_point started{};
  Clock::time_point ended{};
  std::string spawn_error;  // for JobEnd::Kind::SpawnFailed: what could not be started
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

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sgpu::launcher
