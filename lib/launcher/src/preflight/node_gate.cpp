#include "sgpu/launcher/preflight/node_gate.hpp"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher::preflight {

std::vector<GateFailure> NodeGate::xid_failures(int attempt, bool restarts, const std::vector<env::Gpu>& inventory) {
  std::vector<GateFailure> out;
  if (xids_ == nullptr) {  // the first check: watched from now on, when an attempt may follow
    std::vector<env::Gpu> usable;
    for (const auto& g : inventory)
      if (g.visible && !left_out_.contains(g.index)) usable.push_back(g);
    if (restarts) xids_ = std::make_unique<XidWatch>(usable);
    return out;
  }
  for (const auto& event : xids_->drain()) {
    auto fault = xid_fault(event.xid);
    if (fault.empty() || left_out_.contains(event.gpu) ||
        std::any_of(out.begin(), out.end(), [&](const GateFailure& f) { return f.gpu == event.gpu; }))
      continue;
    out.push_back({event.gpu, fmt::format("XID {} ({}) during attempt {}", event.xid, fault, attempt - 1)});
  }
  return out;
}

NodeGate::Result NodeGate::check(LaunchPlan& plan, int attempt, bool restarts, const std::vector<env::Gpu>& inventory,
                                 const std::function<LaunchPlan()>& remake) {
  Result out;
  if (plan.gpus.empty()) return out;
  const auto needed = plan.gpus.size();  // a plan made again must not run the same ranks on fewer GPUs
  auto failures = xid_failures(attempt, restarts, inventory);
  for (;;) {
    auto result = health_gate(plan.gpus);
    if (!result.error.empty()) {
      if (!unread_said_) out.unread = result.error;
      unread_said_ = true;
      return out;
    }
    for (const auto& f : result.failures)  // one reason a GPU: the XID's first
      if (std::none_of(failures.begin(), failures.end(), [&](const GateFailure& x) { return x.gpu == f.gpu; }))
        failures.push_back(f);
    if (failures.empty()) return out;
    std::string failed;
    for (const auto& f : failures) {
      left_out_.insert(f.gpu);
      failed += fmt::format("{}GPU {} ({})", failed.empty() ? "" : "; ", f.gpu, f.reason);
    }
    auto count = failures.size();
    out.excluded.insert(out.excluded.end(), failures.begin(), failures.end());
    failures.clear();
    std::string why;
    try {
      plan = remake();
      if (plan.gpus.size() < needed)
        why = fmt::format("this node's ranks need {} GPUs and {} {} left", needed, plan.gpus.size(),
                          plan.gpus.size() == 1 ? "is" : "are");
    } catch (const Error& e) {
      why = e.what();
    }
    if (!why.empty()) {
      out.refusal = fmt::format("{} failed the health gate, and no spare GPU is left to take {} place: {}", failed,
                                count == 1 ? "its" : "their", why);
      return out;
    }
  }
}

}  // namespace sgpu::launcher::preflight
