// The preflight across nodes: each node's share (NodePreflight, in its
// agent) and the launcher's one verdict over every node's report.
#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>

#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include "devices/shared_library.hpp"
#include "preflight/allreduce_run.hpp"
#include "preflight/health_json.hpp"
#include "sgpu/launcher/io/json_depth.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"

namespace sgpu::launcher::preflight {
namespace {

using Clock = std::chrono::steady_clock;

std::string node_report_json(const HealthReport& health, const AllReduceOutcome& outcome,
                             const std::string& unavailable, double duration_s) {
  nlohmann::json doc;
  if (!unavailable.empty()) doc["unavailable"] = unavailable;
  doc["duration_s"] = duration_s;
  doc["nccl_version"] = outcome.nccl_version;
  doc["health"] = {{"ok", health.ok},
                   {"error", health.error},
                   {"gpus", nlohmann::json::array()},
                   {"links", nlohmann::json::array()}};
  for (const auto& g : health.gpus) doc["health"]["gpus"].push_back(gpu_json(g));
  for (const auto& l : health.links) doc["health"]["links"].push_back(link_json(l));
  doc["failures"] = outcome.failures;
  doc["sizes"] = nlohmann::json::array();
  for (const auto& s : outcome.sizes) doc["sizes"].push_back({{"bytes", s.bytes}, {"rank_time_us", s.rank_times_us}});
  return doc.dump();
}

}  // namespace

struct NodePreflight::Impl {
  Clock::time_point started = Clock::now();
  HealthReport health;
  std::function<void(std::string)> on_report;
  std::unique_ptr<AllReduceRun> run;

  void report(const AllReduceOutcome& outcome, const std::string& unavailable) {
    auto duration = std::chrono::duration<double>(Clock::now() - started).count();
    if (on_report) on_report(node_report_json(health, outcome, unavailable, duration));
  }
};

NodePreflight::NodePreflight(boost::asio::io_context& io, PreflightRequest request, int rank_base, int nranks,
                             std::function<void(const std::string&)> on_unique_id,
                             std::function<void(std::string)> on_report)
    : impl_(std::make_shared<Impl>()) {
  impl_->on_report = std::move(on_report);
  std::string missing;
  if (SharedLibrary cuda("libcuda.so.1"); !cuda.loaded())
    missing = "no NVIDIA driver: " + cuda.error();  // the workers could only wait out the time limit
  else if (SharedLibrary nccl("libnccl.so.2"); !nccl.loaded())
    missing = "no NCCL: " + nccl.error();
  if (!missing.empty()) {
    // Nothing to start: the launcher hears it at once (from the loop, as always).
    boost::asio::post(io, [weak = std::weak_ptr<Impl>(impl_), why = std::move(missing)] {
      if (auto impl = weak.lock()) impl->report({}, why);
    });
    return;
  }
  impl_->health = query_health(request.gpus);
  impl_->run = std::make_unique<AllReduceRun>(io, request, AllReduceShare{rank_base, nranks, std::move(on_unique_id)},
                                              [weak = std::weak_ptr<Impl>(impl_)](AllReduceOutcome outcome) {
                                                // posted: this may have been destroyed since
                                                if (auto impl = weak.lock()) impl->report(outcome, outcome.unavailable);
                                              });
}

NodePreflight::~NodePreflight() {
  impl_->on_report = nullptr;
  impl_->run.reset();  // kills what still runs
}

void NodePreflight::unique_id(const std::string& hex) {
  if (impl_->run) impl_->run->unique_id(hex);
}

PreflightResult combine_reports(const std::vector<NodeReport>& nodes, const PreflightRequest& request, bool complete) {
  PreflightResult r;
  HealthReport health;
  health.ok = true;
  AllReduceOutcome outcome;
  std::vector<std::map<std::uint64_t, std::vector<double>>> times(nodes.size());
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const auto& node = nodes[k].node;
    try {
      if (json_nesting_depth(nodes[k].report, 8) > 8) throw std::runtime_error("nested too deep");
      auto doc = nlohmann::json::parse(nodes[k].report);
      r.duration_s = std::max(r.duration_s, doc.value("duration_s", 0.0));
      if (auto why = doc.value("unavailable", std::string()); !why.empty()) {
        r.status = PreflightResult::Status::unavailable;
        r.unavailable = fmt::format("node {}: {}", node, why);
        return r;
      }
      if (outcome.nccl_version == 0) outcome.nccl_version = doc.value("nccl_version", 0);
      const auto& h = doc.at("health");
      if (!h.value("ok", false) && health.ok) {
        health.ok = false;
        health.error = fmt::format("node {}: {}", node, h.value("error", std::string()));
      }
      for (const auto& g : h.at("gpus")) {
        health.gpus.push_back(gpu_from_json(g));
        health.gpus.back().node = node;
      }
      for (const auto& l : h.at("links")) {
        health.links.push_back(link_from_json(l));
        health.links.back().node = node;
      }
      for (const auto& f : doc.at("failures"))
        outcome.failures.push_back(fmt::format("node {}: {}", node, f.get<std::string>()));
      for (const auto& s : doc.at("sizes"))
        times[k][s.at("bytes").get<std::uint64_t>()] = s.at("rank_time_us").get<std::vector<double>>();
    } catch (const std::exception& e) {
      outcome.failures.push_back(fmt::format("node {}: its preflight report cannot be read ({})", node, e.what()));
    }
  }
  // One table over every rank: a size counts once every node has it.
  for (auto bytes : request.sizes) {
    if (!complete) break;
    SizeRow row;
    row.bytes = bytes;
    bool everywhere = true;
    for (const auto& node_times : times) {
      auto it = node_times.find(bytes);
      if (it == node_times.end()) {
        everywhere = false;
        break;
      }
      row.rank_times_us.insert(row.rank_times_us.end(), it->second.begin(), it->second.end());
    }
    if (!everywhere || row.rank_times_us.empty()) break;
    row.bandwidth = bandwidth(bytes, row.rank_times_us);
    outcome.sizes.push_back(std::move(row));
  }
  if (complete && outcome.failures.empty() && outcome.sizes.size() < request.sizes.size())
    outcome.failures.push_back("the all-reduce did not finish on every node");
  // Across nodes the network sets the bandwidth: only the user's number is an expectation.
  if (request.expect_busbw) {
    const auto& first = health.gpus.empty() ? GpuHealth{} : health.gpus.front();
    r.expectation = expectation_for(first.type, first.name, request.expect_busbw);
  }
  judge_all(r, health, outcome, health.gpus.size());
  return r;
}

}  // namespace sgpu::launcher::preflight
