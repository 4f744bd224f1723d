// JobControl's restart decision on a real event loop, with Actions that
// record what they are asked instead of signalling processes.
#include <csignal>
#include <optional>
#include <vector>

#include <doctest/doctest.h>

#include <boost/asio/io_context.hpp>

#include "sgpu/launcher/process/job_control.hpp"

using namespace sgpu::launcher;
using sgpu::env::ExitStatus;
using sgpu::env::JobEnd;
using sgpu::env::Seconds;

namespace {

struct Recorder : JobControl::Actions {
  std::vector<int> signals;
  std::vector<JobEnd::Kind> stopping;
  std::vector<std::pair<int, double>> restarts;  // attempt, backoff in seconds
  void signal_job(int sig) override { signals.push_back(sig); }
  void kill_job() override { signals.push_back(SIGKILL); }
  void forward_signal(int sig) override { signals.push_back(sig); }
  void on_stopping(const JobEnd& cause) override { stopping.push_back(cause.kind); }
  void on_restart(int attempt, const JobEnd&, Seconds backoff) override {
    restarts.emplace_back(attempt, backoff.count());
  }
};

JobControlOptions restarting(int max_restarts, double backoff, std::optional<Seconds> timeout = std::nullopt) {
  JobControlOptions o;
  o.timeout = timeout;
  o.handle_signals = false;
  o.max_restarts = max_restarts;
  o.restart_backoff = Seconds{backoff};
  return o;
}

// One attempt whose rank 0 ends with `status`; returns what attempt_over decided.
std::optional<bool> fail_once(boost::asio::io_context& io, JobControl& control, ExitStatus status) {
  control.start();
  control.rank_exited(0, status);
  control.all_exited();
  std::optional<bool> again;
  control.attempt_over([&](bool a) { again = a; });
  io.run();
  io.restart();
  return again;
}

}  // namespace

TEST_CASE("launcher::JobControl restarts") {
  boost::asio::io_context io;
  Recorder actions;
  SUBCASE("a rank failure with restarts left starts again after the backoff, doubling it") {
    JobControl control(io, restarting(2, 0.001), actions);
    CHECK(fail_once(io, control, ExitStatus::exited(3)) == true);
    CHECK(control.attempt() == 1);
    CHECK(fail_once(io, control, ExitStatus::exited(3)) == true);
    CHECK(actions.restarts == std::vector<std::pair<int, double>>{{1, 0.001}, {2, 0.002}});
    SUBCASE("and ends once they are spent, with the last failure") {
      CHECK(fail_once(io, control, ExitStatus::exited(3)) == false);
      CHECK(control.end().kind == JobEnd::Kind::RankFailed);
      CHECK(control.attempt() == 2);
    }
  }
  SUBCASE("without restarts a failure ends the run") {
    JobControl control(io, restarting(0, 0.001), actions);
    CHECK(fail_once(io, control, ExitStatus::exited(1)) == false);
    CHECK(actions.restarts.empty());
  }
  SUBCASE("a program not found is not restarted") {
    JobControl control(io, restarting(5, 0.001), actions);
    CHECK(fail_once(io, control, ExitStatus::exited(127)) == false);
  }
  SUBCASE("success is not restarted") {
    JobControl control(io, restarting(5, 0.001), actions);
    CHECK(fail_once(io, control, ExitStatus::exited(0)) == false);
    CHECK(control.end().kind == JobEnd::Kind::Completed);
  }
  SUBCASE("the timeout during the backoff ends the run at once") {
    JobControl control(io, restarting(5, 30, Seconds{0.05}), actions);
    CHECK(fail_once(io, control, ExitStatus::exited(3)) == false);
    CHECK(control.end().kind == JobEnd::Kind::TimedOut);
    CHECK(actions.stopping == std::vector<JobEnd::Kind>{JobEnd::Kind::RankFailed, JobEnd::Kind::TimedOut});
  }
  SUBCASE("a failure's teardown keeps the run's timeout running") {
    JobControl control(io, restarting(5, 0.001, Seconds{0.05}), actions);
    control.start();
    control.rank_exited(0, ExitStatus::exited(3));
    std::optional<bool> again;
    io.run_one();  // the timeout fires while the failed attempt is still being torn down
    control.all_exited();
    control.attempt_over([&](bool a) { again = a; });
    CHECK(again == false);
    CHECK(control.end().kind == JobEnd::Kind::TimedOut);
  }
}

TEST_CASE("launcher::JobControl::stop_for_good: a lost node rules out another attempt") {
  boost::asio::io_context io;
  Recorder actions;
  JobEnd lost;
  lost.kind = JobEnd::Kind::NodeLost;
  lost.host = "nodeb";
  JobControl control(io, restarting(5, 30), actions);
  control.start();
  SUBCASE("during a teardown that would restart: the run ends with the lost node") {
    control.rank_exited(0, ExitStatus::exited(3));
    CHECK(control.restart_pending());
    CHECK(control.stop_for_good(lost, SIGTERM));
    CHECK_FALSE(control.restart_pending());
    std::optional<bool> again;
    control.attempt_over([&](bool a) { again = a; });
    CHECK(again == false);
    CHECK(control.end().kind == JobEnd::Kind::NodeLost);
    CHECK(actions.stopping == std::vector<JobEnd::Kind>{JobEnd::Kind::RankFailed, JobEnd::Kind::NodeLost});
  }
  SUBCASE("during the backoff: the run ends at once, not after it") {
    control.rank_exited(0, ExitStatus::exited(3));
    control.all_exited();
    std::optional<bool> again;
    control.attempt_over([&](bool a) { again = a; });
    CHECK(control.restart_pending());
    CHECK(control.stop_for_good(lost, SIGTERM));
    CHECK(again == false);
    CHECK(control.end().kind == JobEnd::Kind::NodeLost);
  }
  SUBCASE("first, it stops the job like any cause, and a later failure is not restarted either") {
    CHECK(control.stop_for_good(lost, SIGTERM));
    CHECK(actions.signals == std::vector<int>{SIGTERM});
    CHECK_FALSE(control.restart_pending());
    CHECK_FALSE(control.stop_for_good(lost, SIGTERM));  // already ending for good: the first cause stays
  }
}
