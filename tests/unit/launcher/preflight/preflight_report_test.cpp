#include <doctest/doctest.h>

#include "sgpu/launcher/preflight/preflight.hpp"

using namespace sgpu::launcher::preflight;

namespace {
PreflightResult two_healthy_gpus() {
  PreflightResult r;
  r.nccl_version = 22809;
  r.duration_s = 3.25;
  for (int i = 0; i < 2; ++i) {
    GpuRow row;
    row.health.index = i;
    row.health.type = "H100";
    r.gpus.push_back(row);
  }
  SizeRow size;
  size.bytes = 1ULL << 30;
  size.bandwidth = {2800.0, 383.5, 383.5};
  r.sizes.push_back(size);
  return r;
}
}  // namespace

TEST_CASE("preflight::preflight_headline") {
  SUBCASE("healthy: the cost and the bandwidth") {
    CHECK(preflight_headline(two_healthy_gpus()) == "preflight: 2 GPUs healthy in 3.2s (busbw 383.5 GB/s at 1 GiB)");
  }
  SUBCASE("with warnings") {
    auto r = two_healthy_gpus();
    r.verdict = Verdict::warn;
    CHECK(preflight_headline(r) == "preflight: 2 GPUs healthy with warnings in 3.2s (busbw 383.5 GB/s at 1 GiB)");
  }
  SUBCASE("failed: the first failure, naming the GPU") {
    auto r = two_healthy_gpus();
    r.status = PreflightResult::Status::failed;
    r.failures = {"GPU 1 (00000000:19:00.0): 3 uncorrectable ECC errors since the driver loaded"};
    CHECK(preflight_headline(r) ==
          "preflight: failed in 3.2s: GPU 1 (00000000:19:00.0): 3 uncorrectable ECC errors since the driver loaded");
  }
  SUBCASE("not checked") {
    PreflightResult r;
    r.status = PreflightResult::Status::unavailable;
    r.unavailable = "no NCCL: libnccl.so.2: cannot open shared object file";
    CHECK(preflight_headline(r) == "preflight: not checked: no NCCL: libnccl.so.2: cannot open shared object file");
  }
}

TEST_CASE("preflight::preflight_exit_code") {
  PreflightResult r;
  CHECK(preflight_exit_code(r) == 0);
  r.verdict = Verdict::warn;
  CHECK(preflight_exit_code(r) == 0);
  r.status = PreflightResult::Status::failed;
  CHECK(preflight_exit_code(r) == kExitCheckFailed);
  r.status = PreflightResult::Status::unavailable;
  CHECK(preflight_exit_code(r) == kExitUnavailable);
}

TEST_CASE("preflight::preflight_json") {
  SUBCASE("unavailable: status, code and reason only") {
    PreflightResult r;
    r.status = PreflightResult::Status::unavailable;
    r.unavailable = "no GPU: the driver lists none";
    CHECK(preflight_json(r) ==
          nlohmann::json{{"status", "unavailable"}, {"exit_code", 3}, {"reason", "no GPU: the driver lists none"}});
  }
  SUBCASE("unsupported NVML facts are null, not zero") {
    auto doc = preflight_json(two_healthy_gpus());
    CHECK(doc["status"] == "healthy");
    CHECK(doc["nccl_version"] == "2.28.9");
    CHECK(doc["gpus"][0]["ecc_volatile_uncorrected"].is_null());
    CHECK(doc["allreduce"]["sizes"][0]["busbw_gbps"] == 383.5);
  }
}
