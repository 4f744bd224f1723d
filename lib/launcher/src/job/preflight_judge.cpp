#include "job/preflight_judge.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {

std::optional<rendezvous::Message> PreflightJudge::on_report(const rendezvous::NodeInfo& node, std::size_t ready,
                                                             std::uint32_t nnodes) {
  if (reports_.size() < nnodes) reports_.resize(nnodes);
  reports_[node.node_rank] = preflight::NodeReport{node.name, node.preflight};
  std::vector<preflight::NodeReport> reports;
  for (const auto& r : reports_) {
    if (r) reports.push_back(*r);
  }
  bool complete = ready == nnodes;
  auto result = preflight::combine_reports(reports, preflight::preflight_request(spec_), complete);
  // Early, only what stops the all-reduce (a node's workers failed, or it
  // has no NCCL): the others' workers would wait for it. A GPU's health is
  // judged with every node's report.
  if (!complete && result.status != preflight::PreflightResult::Status::unavailable &&
      result.allreduce.verdict != preflight::Verdict::fail)
    return std::nullopt;
  auto report = (std::filesystem::path(run_dir_) / "preflight.json").string();
  try {
    preflight::keep_report(result, run_dir_);
  } catch (const Error& e) {
    notice_(fmt::format("warning: {}", e.what()));
  }
  auto refusal = preflight::launch_refusal(result, report);
  if (spec_.preflight.only) {  // the check was the job: every node ends here
    auto code = preflight::preflight_exit_code(result);
    auto headline = preflight::preflight_headline(result);
    only_result_ = std::move(result);
    if (refusal) return rendezvous::Abort{refusal->what(), refusal->exit_code()};
    return rendezvous::Finish{code, headline};
  }
  if (refusal) return rendezvous::Abort{refusal->what(), refusal->exit_code()};
  notice_(preflight::preflight_headline(result));
  return std::nullopt;
}

}  // namespace sgpu::launcher
