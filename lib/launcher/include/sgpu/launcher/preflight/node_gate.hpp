#pragma once
// The health gate of one node across a run's attempts (--health-gate), as
// the local backend and each agent of a multi-node job hold it: before each
// attempt the plan's GPUs are read through NVML (health_gate), and with
// restarts the XIDs the node's GPUs reported during the attempt before
// (XidWatch, xid_fault). A GPU that fails is left out for the rest of the
// run and the plan is made again without it, so a GPU of the node beyond the
// job's takes its place.
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sgpu/env/gpu.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/preflight/health.hpp"

namespace sgpu::launcher::preflight {

class NodeGate {
 public:
  struct Result {
    std::vector<GateFailure> excluded;  // left out this time, in order
    std::string unread;                 // NVML could not be read, said the first time only: nothing was judged
    std::string refusal;  // no healthy plan is left: why ("GPU 1 (...) failed the health gate, and no spare...")
  };
  // `plan` for `attempt`, judged and made again by `remake` (which throws
  // Error when no plan fits) until it passes. `inventory`: the node's GPUs;
  // the visible ones not left out yet have their XIDs watched from the first
  // check on when `restarts`.
  Result check(LaunchPlan& plan, int attempt, bool restarts, const std::vector<env::Gpu>& inventory,
               const std::function<LaunchPlan()>& remake);
  // Every GPU left out so far: the plan's inventory must mark them invisible.
  const std::set<int>& left_out() const { return left_out_; }

 private:
  std::vector<GateFailure> xid_failures(int attempt, bool restarts, const std::vector<env::Gpu>& inventory);
  std::set<int> left_out_;
  bool unread_said_ = false;
  std::unique_ptr<XidWatch> xids_;
};

}  // namespace sgpu::launcher::preflight
