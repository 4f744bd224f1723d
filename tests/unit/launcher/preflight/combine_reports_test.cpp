#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "sgpu/launcher/preflight/preflight.hpp"

using namespace sgpu::launcher::preflight;
using json = nlohmann::json;

namespace {

// A node's report as NodePreflight writes it: two H100s, one time per rank
// and size (all ranks equally fast), optional ECC errors and failures.
std::string node_report(std::vector<double> times_us, std::uint64_t ecc_on_gpu1 = 0,
                        std::vector<std::string> failures = {}) {
  json gpus = json::array();
  for (int i = 0; i < 2; ++i)
    gpus.push_back({{"index", i},
                    {"type", "H100"},
                    {"name", "NVIDIA H100 80GB HBM3"},
                    {"pci_bus_id", i == 0 ? "00000000:18:00.0" : "00000000:19:00.0"},
                    {"ecc_volatile_uncorrected", i == 1 ? ecc_on_gpu1 : 0}});
  json sizes = json::array();
  for (std::uint64_t bytes : {8ULL, 16ULL}) sizes.push_back({{"bytes", bytes}, {"rank_time_us", times_us}});
  return json{
      {"duration_s", 1.5},
      {"nccl_version", 22809},
      {"health",
       {{"ok", true}, {"error", ""}, {"gpus", gpus}, {"links", json::array({{{"a", 0}, {"b", 1}, {"path", "NV"}}})}}},
      {"failures", failures},
      {"sizes", sizes}}
      .dump();
}

PreflightRequest two_sizes() {
  PreflightRequest request;
  request.sizes = {8, 16};
  return request;
}

}  // namespace

TEST_CASE("preflight::combine_reports") {
  const auto request = two_sizes();
  SUBCASE("healthy nodes: GPUs and links named by node, one table over every rank") {
    auto r = combine_reports({{"a", node_report({10, 10})}, {"b", node_report({20, 20})}}, request, true);
    CHECK(r.status == PreflightResult::Status::healthy);
    REQUIRE(r.gpus.size() == 4);
    CHECK(r.gpus[2].health.node == "b");
    CHECK(gpu_label(r.gpus[3].health) == "b GPU 1 (00000000:19:00.0)");
    REQUIRE(r.links.size() == 2);
    CHECK(r.links[1].link.node == "b");
    REQUIRE(r.sizes.size() == 2);
    CHECK(r.sizes[1].rank_times_us == std::vector<double>{10, 10, 20, 20});
    CHECK(r.sizes[1].bandwidth.time_us == doctest::Approx(15));  // the mean over ranks, as nccl-tests
    CHECK(r.nccl_version == 22809);
    CHECK(r.duration_s == doctest::Approx(1.5));
    CHECK_FALSE(r.expectation.has_value());  // across nodes the network decides: no table entry
    CHECK(preflight_headline(r).starts_with("preflight: 4 GPUs on 2 nodes healthy in 1.5s (busbw"));
  }
  SUBCASE("only the user's bandwidth is an expectation across nodes") {
    auto req = request;
    req.expect_busbw = 1000.0;
    auto r = combine_reports({{"a", node_report({10, 10})}, {"b", node_report({20, 20})}}, req, true);
    REQUIRE(r.expectation.has_value());
    CHECK(r.status == PreflightResult::Status::failed);
    CHECK(r.failures.front().starts_with("all-reduce across 4 GPUs at 16 B: "));
  }
  struct Case {
    const char* name;
    std::vector<NodeReport> nodes;
    bool complete;
    PreflightResult::Status status;
    std::string first;  // failure or reason
  };
  const Case cases[] = {
      {"a node's GPU fails its health check",
       {{"a", node_report({10, 10})}, {"b", node_report({10, 10}, 3)}},
       true,
       PreflightResult::Status::failed,
       "b GPU 1 (00000000:19:00.0): 3 uncorrectable ECC errors since the driver loaded"},
      {"a node's workers failed",
       {{"a", node_report({10, 10}, 0, {"GPU 0 (00000000:18:00.0): the all-reduce worker exited with 1"})}},
       false,
       PreflightResult::Status::failed,
       "node a: GPU 0 (00000000:18:00.0): the all-reduce worker exited with 1"},
      {"a node without NCCL",
       {{"a", node_report({10, 10})}, {"b", R"({"unavailable": "no NCCL: not found"})"}},
       false,
       PreflightResult::Status::unavailable,
       "node b: no NCCL: not found"},
      {"a report that is not JSON",
       {{"b", "{"}},
       false,
       PreflightResult::Status::failed,
       "node b: its preflight report cannot be read"},
      {"a report nested too deep",
       {{"b", std::string(100, '[') + std::string(100, ']')}},
       false,
       PreflightResult::Status::failed,
       "node b: its preflight report cannot be read"},
      {"a node short of sizes",
       {{"a", node_report({10, 10})},
        {"b", json{{"health", {{"ok", true}, {"gpus", json::array()}, {"links", json::array()}}},
                   {"failures", json::array()},
                   {"sizes", json::array()}}
                  .dump()}},
       true,
       PreflightResult::Status::failed,
       "the all-reduce did not finish on every node"},
      {"partial and healthy so far: nothing judged yet",
       {{"a", node_report({10, 10})}},
       false,
       PreflightResult::Status::healthy,
       ""},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    auto r = combine_reports(c.nodes, request, c.complete);
    CHECK(r.status == c.status);
    if (c.status == PreflightResult::Status::unavailable) {
      CHECK(r.unavailable == c.first);
    } else if (c.status == PreflightResult::Status::failed) {
      REQUIRE_FALSE(r.failures.empty());
      CHECK(r.failures.front().starts_with(c.first));
    } else {
      CHECK(r.sizes.empty());  // no partial table
    }
  }
}
