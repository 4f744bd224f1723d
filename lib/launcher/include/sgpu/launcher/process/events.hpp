#pragma once
// What the supervisor reports while a job runs. The supervisor only handles
// processes; observers (console printer, logs, the report) decide what to show.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/env/stop_signal.hpp"
#include "sgpu/launcher/process/output_flow.hpp"
#include "sgpu/launcher/process/samples.hpp"

namespace sgpu::launcher {

enum class Stream { Out, Err };
using Clock = std::chrono::system_clock;
// Holds bytes that were read: while a copy of it lives, they stay as they are.
using BytesOwner = std::shared_ptr<const void>;

// Multi-node runs: the ranks first_rank .. first_rank+ranks-1 run on `host`.
struct NodePlacement {
  int node_rank = 0;
  std::string host;  // the node's name: the backend's name for it, else its hostname
  int first_rank = 0;
  int ranks = 0;
};

// A GPU the health gate left out for the rest of the run (--health-gate).
struct Exclusion {
  std::string host;  // "" on one node
  int gpu = -1;      // -1: the whole node, lost and replaced by a spare (--spares)
  std::string reason;
  int attempt = 0;  // the attempt it was left out before
};

class JobObserver {
 public:
  virtual ~JobObserver() = default;
  // Multi-node runs only, once, before any rank starts: which node runs
  // which ranks (for "[host:rank]" prefixes, logs, the report). Rank numbers
  // in every other event are global.
  virtual void on_nodes_placed(const std::vector<NodePlacement>& /*nodes*/) {}
  virtual void on_rank_started(int /*rank*/, int /*pid*/) {}
  // Raw bytes as read from the rank's pipe: not split into lines. `bytes` is
  // valid during the call; where `owner` is set, also for as long as a copy
  // of it lives, so an observer that queues them (the log writer) can keep
  // `owner` instead of copying them.
  virtual void on_rank_output(int /*rank*/, Stream /*stream*/, std::string_view /*bytes*/,
                              const BytesOwner& /*owner*/) {}
  // The pipe reached end of file: flush a partial last line.
  virtual void on_rank_output_closed(int /*rank*/, Stream /*stream*/) {}
  virtual void on_rank_exited(int /*rank*/, const env::ExitStatus& /*status*/, bool /*terminated_by_sgpu*/) {}
  // The first reason to stop the job: a rank failed, the timeout, a signal.
  virtual void on_teardown(const env::JobEnd& /*cause*/) {}
  // Restarts (--max-restarts): the attempt that ended for `cause` (its
  // teardown done) is followed by attempt `attempt` (1 for the first
  // restart) once `backoff` has passed.
  virtual void on_restart(int /*attempt*/, const env::JobEnd& /*cause*/, env::Seconds /*backoff*/) {}
  // --signal-before: its signal went to every rank, `deadline` being the
  // run's end; `sent` false: the deadline was closer than that at the start,
  // so none will go.
  virtual void on_signal_before(const env::SignalBefore& /*signal*/, Clock::time_point /*deadline*/, bool /*sent*/) {}
  // Attempt `attempt` (> 0) starts its ranks now; rank events that follow are its.
  virtual void on_attempt_started(int /*attempt*/) {}
  // The health gate left a GPU out for the rest of the run, before `e.attempt`.
  virtual void on_excluded(const Exclusion& /*e*/) {}
  // --sample-every: one node's ranks and GPUs as its sampler saw them now
  // (on one node, this node's; in a multi-node run, each node's as it arrives).
  virtual void on_sample(const NodeSample& /*sample*/) {}
  // The flows an observer pauses when it cannot take output now (the console
  // with a lagging reader, the run log with a lagging disk); none: it never
  // does. Output is read while all are open. Shared: the supervisor may
  // outlive their owners, and the reverse.
  virtual std::vector<std::shared_ptr<OutputFlow>> output_flows() { return {}; }
};

}  // namespace sgpu::launcher
