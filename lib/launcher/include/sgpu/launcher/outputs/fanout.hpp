#pragma once
// One observer that hands every event to several, in the order added: the
// run log first (so bytes are queued for disk before anything else may fail), then
// the console and the status line.
#include <vector>

#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

class FanOut : public JobObserver {
 public:
  void add(JobObserver& observer) { observers_.push_back(&observer); }

  void on_rank_started(int rank, int pid) override {
    for (auto* o : observers_) o->on_rank_started(rank, pid);
  }
  void on_rank_output(int rank, Stream stream, std::string_view bytes, const BytesOwner& owner) override {
    for (auto* o : observers_) o->on_rank_output(rank, stream, bytes, owner);
  }
  void on_rank_output_closed(int rank, Stream stream) override {
    for (auto* o : observers_) o->on_rank_output_closed(rank, stream);
  }
  void on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) override {
    for (auto* o : observers_) o->on_rank_exited(rank, status, terminated_by_sgpu);
  }
  void on_teardown(const env::JobEnd& cause) override {
    for (auto* o : observers_) o->on_teardown(cause);
  }
  void on_signal_before(const env::SignalBefore& signal, Clock::time_point deadline, bool sent) override {
    for (auto* o : observers_) o->on_signal_before(signal, deadline, sent);
  }
  void on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) override {
    for (auto* o : observers_) o->on_restart(attempt, cause, backoff);
  }
  void on_attempt_started(int attempt) override {
    for (auto* o : observers_) o->on_attempt_started(attempt);
  }
  void on_nodes_placed(const std::vector<NodePlacement>& nodes) override {
    for (auto* o : observers_) o->on_nodes_placed(nodes);
  }
  void on_excluded(const Exclusion& e) override {
    for (auto* o : observers_) o->on_excluded(e);
  }
  void on_sample(const NodeSample& sample) override {
    for (auto* o : observers_) o->on_sample(sample);
  }
  std::vector<std::shared_ptr<OutputFlow>> output_flows() override {
    std::vector<std::shared_ptr<OutputFlow>> flows;
    for (auto* o : observers_)
      for (auto& flow : o->output_flows()) flows.push_back(std::move(flow));
    return flows;
  }

 private:
  std::vector<JobObserver*> observers_;
};

}  // namespace sgpu::launcher
