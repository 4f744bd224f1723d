#pragma once
// Starts one `sgpu doctor --worker` per GPU on an io_context and gathers what
// they report: the first worker of the all-reduce (global rank 0) first, the
// others once its NCCL unique id is known. The first failure, or the time
// limit, kills every worker's process group.
//
// On one node all workers are this run's. Across nodes each node's agent runs
// its share (`AllReduceShare`): node 0's run hands the unique id out through
// `on_unique_id`, the other nodes' runs wait for it in unique_id().
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/launcher/preflight/preflight.hpp"

namespace sgpu::launcher::preflight {

struct AllReduceOutcome {
  std::vector<SizeRow> sizes;         // sizes every rank finished, in order (bandwidth of these ranks)
  std::vector<std::string> failures;  // naming the GPU
  std::string unavailable;            // the GPU stack is missing: one line
  int nccl_version = 0;
};

struct AllReduceShare {
  int rank_base = 0;  // the global rank of this run's first worker
  int nranks = 0;     // workers on every node; 0: this run's only
  // rank_base 0 across nodes: rank 0's unique id, for the other nodes.
  std::function<void(const std::string&)> on_unique_id;
};

class AllReduceRun {
 public:
  // Starts at once; `on_done` is called once, from the loop, when every
  // worker has ended (or the time limit passed and they were killed).
  AllReduceRun(boost::asio::io_context& io, const PreflightRequest& request, AllReduceShare share,
               std::function<void(AllReduceOutcome)> on_done);
  ~AllReduceRun();  // kills the workers still running
  AllReduceRun(const AllReduceRun&) = delete;
  AllReduceRun& operator=(const AllReduceRun&) = delete;

  // Rank 0's unique id from another node: starts this run's workers.
  void unique_id(const std::string& hex);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// The verdicts (per GPU, link, and the all-reduce against r.expectation,
// which the caller sets) from the facts, into `r`.
void judge_all(PreflightResult& r, const HealthReport& health, const AllReduceOutcome& outcome, std::size_t gpu_count);

// One node, on a loop of its own, to the end.
AllReduceOutcome run_allreduce(const PreflightRequest& request);

}  // namespace sgpu::launcher::preflight
