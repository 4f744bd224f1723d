#include <chrono>
#include <csignal>
#include <vector>

#include <doctest/doctest.h>

#include "sgpu/launcher/process/job_control.hpp"

using namespace sgpu;
using namespace sgpu::launcher;
using namespace std::chrono_literals;

namespace {
// Records what JobControl asks of the job.
struct Recorder : JobControl::Actions {
  std::vector<int> signalled, forwarded;
  std::vector<bool> warned;  // on_signal_before's `sent`
  void signal_job(int sig) override { signalled.push_back(sig); }
  void kill_job() override { signalled.push_back(SIGKILL); }
  void forward_signal(int sig) override { forwarded.push_back(sig); }
  void on_stopping(const env::JobEnd&) override {}
  void on_signal_before(const env::SignalBefore&, std::chrono::system_clock::time_point, bool sent) override {
    warned.push_back(sent);
  }
};

JobControlOptions options(double timeout_s, double before_s) {
  JobControlOptions o;
  o.timeout = env::Seconds(timeout_s);
  o.grace = env::Seconds(5);
  o.handle_signals = false;
  o.signal_before = env::SignalBefore{SIGUSR2, env::Seconds(before_s)};
  return o;
}
}  // namespace

TEST_CASE("launcher::JobControl signal_before and the stop signal") {
  boost::asio::io_context io;
  Recorder job;
  SUBCASE("the signal goes once, before the timeout, and the timeout stops with the stop signal") {
    auto o = options(0.3, 0.2);
    o.stop_signal = SIGUSR1;
    JobControl control(io, o, job);
    control.start();
    REQUIRE(control.deadline());
    io.run_for(200ms);
    CHECK(job.forwarded == std::vector<int>{SIGUSR2});
    CHECK(job.warned == std::vector<bool>{true});
    CHECK(job.signalled.empty());
    io.run_for(200ms);
    CHECK(job.forwarded == std::vector<int>{SIGUSR2});
    CHECK(job.signalled == std::vector<int>{SIGUSR1});
    CHECK(control.end().kind == env::JobEnd::Kind::TimedOut);
    control.finish();
  }
  SUBCASE("a deadline closer than the warning sends nothing and says so") {
    JobControl control(io, options(0.05, 1), job);
    control.start();
    io.run_for(20ms);
    CHECK(job.forwarded.empty());
    CHECK(job.warned == std::vector<bool>{false});
    control.finish();
  }
  SUBCASE("the scheduler's end counts when it comes first") {
    auto o = options(3600, 0.05);
    o.end_by = std::chrono::system_clock::now() + 100ms;
    JobControl control(io, o, job);
    control.start();
    CHECK(*control.deadline() == *o.end_by);
    io.run_for(100ms);
    CHECK(job.forwarded == std::vector<int>{SIGUSR2});
    control.finish();
  }
  SUBCASE("an agent forwards the signal once, whoever sends it; others every time") {
    for (bool once : {true, false}) {
      CAPTURE(once);
      Recorder r;
      auto o = options(3600, 60);
      o.signal_before_once = once;
      JobControl control(io, o, r);
      control.start();
      control.forward(SIGUSR2);
      control.forward(SIGUSR2);
      control.forward(SIGUSR1);
      CHECK(r.forwarded == (once ? std::vector<int>{SIGUSR2, SIGUSR1} : std::vector<int>{SIGUSR2, SIGUSR2, SIGUSR1}));
      control.finish();
    }
  }
  SUBCASE("a failed rank stops the others with the stop signal") {
    auto o = options(3600, 60);
    o.stop_signal = SIGINT;
    JobControl control(io, o, job);
    control.start();
    control.rank_exited(1, env::ExitStatus::exited(3));
    CHECK(job.signalled == std::vector<int>{SIGINT});
    control.finish();
  }
}

TEST_CASE("launcher::JobControl the grace of an attempt's teardown ends with that attempt") {
  // A multi-node attempt ends without all_exited when a node was lost (its
  // ranks never report): the SIGKILL due 30 s after that teardown's SIGTERM
  // then fell on the next attempt's ranks once it had run that long.
  boost::asio::io_context io;
  Recorder job;
  auto o = options(3600, 60);
  o.grace = env::Seconds(0.1);
  o.max_restarts = 1;
  o.restart_backoff = env::Seconds(0.01);
  JobControl control(io, o, job);
  control.start();
  env::JobEnd lost;
  lost.kind = env::JobEnd::Kind::RankFailed;
  lost.rank = 1;
  lost.status = env::ExitStatus::exited(1);
  control.stop(lost, SIGTERM);
  CHECK(job.signalled == std::vector<int>{SIGTERM});
  bool again = false;
  control.attempt_over([&](bool a) { again = a; });
  io.run_for(300ms);  // past the backoff, and past the grace of the stop before it
  CHECK(again);
  CHECK(job.signalled == std::vector<int>{SIGTERM});  // no SIGKILL into attempt 1
  control.finish();
}
