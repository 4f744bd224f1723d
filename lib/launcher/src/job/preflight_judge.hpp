#pragma once
// --preflight across nodes, on the launcher: each node's report as it says
// Ready, and the one verdict over all of them (combine_reports), kept in the
// run directory. What stops the all-reduce ends the rendezvous at once (the
// other nodes' workers would wait for it); a GPU's health is judged once
// every node reported.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sgpu/launcher/preflight/preflight.hpp"
#include "sgpu/launcher/spec/spec.hpp"
#include "sgpu/rendezvous/protocol.hpp"
#include "sgpu/rendezvous/server.hpp"

namespace sgpu::launcher {

class PreflightJudge {
 public:
  // Holds the three by reference: the ClusterJob's own, which outlive it.
  PreflightJudge(const JobSpec& spec, const std::string& run_dir, const std::function<void(const std::string&)>& notice)
      : spec_(spec), run_dir_(run_dir), notice_(notice) {}

  // Node `node` said Ready with its report (`ready` of `nnodes` so far):
  // nothing while the verdict waits for more, else what every node hears
  // instead of Start (Abort for a refusal, Finish for --preflight-only).
  std::optional<rendezvous::Message> on_report(const rendezvous::NodeInfo& node, std::size_t ready,
                                               std::uint32_t nnodes);
  // --preflight-only: the verdict, once given (then never again).
  std::optional<preflight::PreflightResult> take_only_result() { return std::exchange(only_result_, std::nullopt); }

 private:
  const JobSpec& spec_;
  const std::string& run_dir_;
  const std::function<void(const std::string&)>& notice_;
  std::vector<std::optional<preflight::NodeReport>> reports_;  // by node rank
  std::optional<preflight::PreflightResult> only_result_;
};

}  // namespace sgpu::launcher
