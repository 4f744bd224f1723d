#pragma once
// What the launch engine gives a backend's run: the run it made (RunStart),
// and JobHost, the engine's side at the three moments only the backend can
// tell: when the ranks are placed, just before they start, and while they
// run. The engine made the run directory and ran the steps that come first
// (--detach, the preflight on this node, asking MLflow for a run) before the
// backend's run() began; a backend calls nothing in a set order.
#include <string>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"

namespace sgpu::launcher {

// The run the engine made for a launch, before its backend starts anything.
struct RunStart {
  std::string id;   // "20261202-115301-3fa2c1"
  std::string dir;  // <runs root>/<id>, which exists (0700)
};

class JobHost {
 public:
  virtual ~JobHost() = default;
  // Once, when the ranks are placed (on many nodes: every node has joined):
  // the whole job's plan. Returns the observer that sees every rank (the
  // console, the logs, the report). May throw sgpu::Error: nothing started.
  virtual JobObserver& observe(boost::asio::io_context& io, const LaunchPlan& plan) = 0;
  // Once, just before the first rank starts (on many nodes: before the job
  // goes out to them): the variables every rank gets on top of the spec's
  // (the launch's MLflow run, asked for before run() and awaited here, so
  // the server works on it while the backend gets ready). The backend adds
  // them to every attempt's ranks. May throw sgpu::Error (a signal, or
  // --timeout, while waiting): nothing started.
  virtual env::Environment ranks_env() = 0;
  // How to take every rank's stack (`sgpu stacks`), once the job is placed;
  // nullptr once it is over, on the loop (what the engine holds open for it,
  // the control socket and --metrics-port's server, closes before the run
  // returns).
  virtual void offer_stacks(StacksTaker taker) = 0;
};

}  // namespace sgpu::launcher
