#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/preflight/checks.hpp"
#include "sgpu/launcher/preflight/preflight.hpp"
#include "sgpu/launcher/preflight/worker.hpp"

using namespace sgpu::launcher::preflight;

TEST_CASE("preflight::allreduce_sizes") {
  SUBCASE("8 B to 1 GiB by 2, as all_reduce_perf -b 8 -e 1G -f 2") {
    auto s = allreduce_sizes(8, 1ULL << 30, 2);
    CHECK(s.size() == 28);
    CHECK(s.front() == 8);
    CHECK(s.back() == 1ULL << 30);
  }
  SUBCASE("by 4 stops below the maximum") {
    auto s = allreduce_sizes(8, 1ULL << 30, 4);
    CHECK(s.size() == 14);
    CHECK(s.back() == 1ULL << 29);
  }
  SUBCASE("one size") { CHECK(allreduce_sizes(1024, 1024, 2) == std::vector<std::uint64_t>{1024}); }
  SUBCASE("rounded down to whole floats") { CHECK(allreduce_sizes(6, 6, 2) == std::vector<std::uint64_t>{4}); }
  SUBCASE("usage errors") {
    CHECK_THROWS_AS(allreduce_sizes(2, 8, 2), sgpu::Error);
    CHECK_THROWS_AS(allreduce_sizes(16, 8, 2), sgpu::Error);
    CHECK_THROWS_AS(allreduce_sizes(8, 16, 1), sgpu::Error);
  }
}

TEST_CASE("preflight::parse_bytes") {
  CHECK(parse_bytes("8", "--min-bytes") == 8);
  CHECK(parse_bytes("64K", "--min-bytes") == 65536);
  CHECK(parse_bytes("1m", "--max-bytes") == 1ULL << 20);
  CHECK(parse_bytes("1G", "--max-bytes") == 1ULL << 30);
  SUBCASE("not a size") {
    CHECK_THROWS_WITH_AS(parse_bytes("1T", "--max-bytes"), doctest::Contains("--max-bytes 1T: not a size"),
                         sgpu::Error);
    CHECK_THROWS_AS(parse_bytes("", "--max-bytes"), sgpu::Error);
    CHECK_THROWS_AS(parse_bytes("K", "--max-bytes"), sgpu::Error);
    CHECK_THROWS_AS(parse_bytes("-8", "--max-bytes"), sgpu::Error);
  }
}

TEST_CASE("preflight::expected_sum is the sum of fill_value over ranks") {
  for (int n : {1, 2, 3, 8, 64}) {
    for (std::uint64_t i : {0ULL, 1ULL, 6ULL, 7ULL, 123457ULL}) {
      float sum = 0;
      for (int r = 0; r < n; ++r) sum += fill_value(r, i);
      CHECK(sum == expected_sum(n, i));
    }
  }
}

TEST_CASE("preflight::fill_values and count_wrong agree with the scalar pattern") {
  // Counts around the 7 * 1024-element block the functions copy and compare.
  for (std::uint64_t count : {0ULL, 1ULL, 7ULL, 7167ULL, 7168ULL, 7169ULL, 3ULL * 7168 + 5}) {
    for (int nranks : {1, 3, 8}) {
      CAPTURE(count);
      CAPTURE(nranks);
      std::vector<float> buf(count + 1, -1.0F);  // one more: nothing past count is written
      fill_values(nranks - 1, buf.data(), count);
      bool same = true;
      for (std::uint64_t i = 0; i < count; ++i) same = same && buf[i] == fill_value(nranks - 1, i);
      CHECK(same);
      CHECK(buf[count] == -1.0F);

      for (std::uint64_t i = 0; i < count; ++i) buf[i] = expected_sum(nranks, i);
      std::uint64_t first = 99;
      CHECK(count_wrong(nranks, buf.data(), count, &first) == 0);
      CHECK(first == 99);
      if (count < 7) continue;
      // Wrong values: the last element, then two more earlier in another block.
      buf[count - 1] += 1;
      CHECK(count_wrong(nranks, buf.data(), count, &first) == 1);
      CHECK(first == count - 1);
      buf[count / 2] = 0;
      buf[3] = std::nanf("");
      CHECK(count_wrong(nranks, buf.data(), count, &first) == (count / 2 == 3 ? 2 : 3));
      CHECK(first == 3);
    }
  }
}

TEST_CASE("preflight::bandwidth") {
  SUBCASE("busbw = algbw * 2(n-1)/n, time averaged over ranks") {
    auto bw = bandwidth(1'000'000'000, {9000.0, 11000.0});  // 1 GB in 10 ms on average
    CHECK(bw.time_us == doctest::Approx(10000.0));
    CHECK(bw.algbw_gbps == doctest::Approx(100.0));
    CHECK(bw.busbw_gbps == doctest::Approx(100.0));  // n = 2: factor 1
  }
  SUBCASE("8 ranks: factor 1.75") {
    auto bw = bandwidth(1'000'000'000, std::vector<double>(8, 10000.0));
    CHECK(bw.busbw_gbps == doctest::Approx(175.0));
  }
  SUBCASE("one rank: no bus traffic") { CHECK(bandwidth(1024, {1.0}).busbw_gbps == 0.0); }
  SUBCASE("no times") { CHECK(bandwidth(1024, {}).algbw_gbps == 0.0); }
}

TEST_CASE("preflight::expectation_for") {
  SUBCASE("SXM H100 by type") {
    auto e = expectation_for("H100", "NVIDIA H100 80GB HBM3", std::nullopt);
    REQUIRE(e);
    CHECK(e->busbw_gbps == 360);
    CHECK(e->source.find("datasheet") != std::string::npos);
  }
  SUBCASE("PCIe H100 by name") {
    auto e = expectation_for("H100", "NVIDIA H100 PCIe", std::nullopt);
    REQUIRE(e);
    CHECK(e->busbw_gbps == 51);
  }
  SUBCASE("an override wins and says so") {
    auto e = expectation_for("H100", "NVIDIA H100 80GB HBM3", 100.0);
    REQUIRE(e);
    CHECK(e->busbw_gbps == 100);
    CHECK(e->source == "--expect-busbw");
  }
  SUBCASE("an unknown type") { CHECK_FALSE(expectation_for("RTX4090", "NVIDIA GeForce RTX 4090", std::nullopt)); }
  SUBCASE("every entry names its source") {
    for (const auto& e : expectation_table()) CHECK_FALSE(e.source.empty());
  }
}

TEST_CASE("preflight::judge_bandwidth") {
  Expectation h100{"H100", "", 400, "test"};
  CHECK(judge_bandwidth(300, 8, h100).verdict == Verdict::pass);  // 75 %
  CHECK(judge_bandwidth(299, 8, h100).verdict == Verdict::warn);
  CHECK(judge_bandwidth(160, 8, h100).verdict == Verdict::warn);  // 40 %
  auto slow = judge_bandwidth(100, 8, h100);
  CHECK(slow.verdict == Verdict::fail);
  REQUIRE(slow.reasons.size() == 1);
  CHECK(slow.reasons[0] == "busbw 100 GB/s is 25% of the 400 GB/s expected (test)");
  SUBCASE("one GPU is not judged by bandwidth") { CHECK(judge_bandwidth(0, 1, h100).verdict == Verdict::pass); }
  SUBCASE("no expectation: pass, with a note") {
    auto j = judge_bandwidth(1, 2, std::nullopt);
    CHECK(j.verdict == Verdict::pass);
    CHECK(j.reasons.size() == 1);
  }
}

TEST_CASE("preflight::judge_gpu") {
  GpuHealth healthy;
  healthy.ecc_volatile_uncorrected = 0;
  healthy.compute_mode = 0;
  healthy.temperature_c = 40;
  healthy.throttle_reasons = 0x1;  // idle
  healthy.nvlinks_active = 18;
  CHECK(judge_gpu(healthy).verdict == Verdict::pass);
  CHECK(judge_gpu(GpuHealth{}).verdict == Verdict::pass);  // nothing known, nothing wrong
  struct Row {
    const char* what;
    void (*change)(GpuHealth&);
    Verdict verdict;
    const char* reason;
  };
  const Row rows[] = {
      {"volatile uncorrectable ECC", [](GpuHealth& g) { g.ecc_volatile_uncorrected = 3; }, Verdict::fail,
       "3 uncorrectable ECC errors since the driver loaded"},
      {"lifetime uncorrectable ECC", [](GpuHealth& g) { g.ecc_aggregate_uncorrected = 2; }, Verdict::warn,
       "2 uncorrectable ECC errors in its lifetime"},
      {"remapped rows pending", [](GpuHealth& g) { g.remapped_rows_pending = true; }, Verdict::fail,
       "remapped rows pending: the GPU needs a reset"},
      {"retired pages pending", [](GpuHealth& g) { g.retired_pages_pending = true; }, Verdict::fail,
       "retired pages pending: the GPU needs a reset"},
      {"row remap failed", [](GpuHealth& g) { g.remap_failed = true; }, Verdict::fail,
       "a row remapping failed: the GPU needs service"},
      {"prohibited", [](GpuHealth& g) { g.compute_mode = 2; }, Verdict::fail,
       "compute mode is Prohibited: no process can use it"},
      {"exclusive and held",
       [](GpuHealth& g) {
         g.compute_mode = 3;
         g.pids = {42};
       },
       Verdict::fail, "compute mode is exclusive and process 42 holds it"},
      {"a stray process",
       [](GpuHealth& g) {
         g.pids = {42, 43};
       },
       Verdict::warn, "2 process(es) already on it (pid 42, 43)"},
      {"MIG", [](GpuHealth& g) { g.mig_enabled = true; }, Verdict::warn,
       "MIG is on: NCCL cannot span MIG instances of separate processes"},
      {"thermal slowdown", [](GpuHealth& g) { g.throttle_reasons = 0x40 | 0x4; }, Verdict::warn,
       "clocks slowed: hw_thermal"},
      {"hot", [](GpuHealth& g) { g.temperature_c = 91; }, Verdict::warn, "temperature 91 C"},
      {"an NVLink down",
       [](GpuHealth& g) {
         g.nvlinks_inactive = 2;
         g.nvlinks_active = 16;
       },
       Verdict::warn, "2 of 18 NVLinks down"},
  };
  for (const auto& row : rows) {
    SUBCASE(row.what) {
      auto g = healthy;
      row.change(g);
      auto j = judge_gpu(g);
      CHECK(j.verdict == row.verdict);
      REQUIRE(j.reasons.size() == 1);
      CHECK(j.reasons[0] == row.reason);
    }
  }
}

TEST_CASE("preflight::throttle_text") {
  CHECK(throttle_text(0) == "");
  CHECK(throttle_text(0x1 | 0x2) == "");  // idle, application clocks: not a slowdown
  CHECK(throttle_text(0x8 | 0x80) == "hw_slowdown, hw_power_brake");
}

TEST_CASE("preflight::judge_link") {
  LinkHealth nv{0, 1, "NV", true, true, ""};
  CHECK(judge_link(nv, 18, 18).verdict == Verdict::pass);
  SUBCASE("no P2P") {
    LinkHealth l{0, 1, "SYS", false, false, ""};
    auto j = judge_link(l, 0, 0);
    CHECK(j.verdict == Verdict::warn);
    CHECK(j.reasons ==
          std::vector<std::string>{"no peer-to-peer between GPU 0 and GPU 1: NCCL copies through host memory"});
  }
  SUBCASE("NVLinks up, but not between these two") {
    LinkHealth l{2, 5, "SYS", true, false, ""};
    CHECK(judge_link(l, 18, 18).verdict == Verdict::warn);
    CHECK(judge_link(l, 0, 0).verdict == Verdict::pass);  // PCIe-only GPUs: nothing missing
  }
  SUBCASE("unknown facts are not faults") {
    CHECK(judge_link(LinkHealth{0, 1, "?", {}, {}, ""}, 4, 4).verdict == Verdict::pass);
  }
}

TEST_CASE("preflight::topology_path") {
  CHECK(topology_path(10) == "PIX");
  CHECK(topology_path(20) == "PXB");
  CHECK(topology_path(30) == "PHB");
  CHECK(topology_path(40) == "NODE");
  CHECK(topology_path(50) == "SYS");
  CHECK(topology_path(7) == "?");
}

TEST_CASE("preflight::format_bytes") {
  CHECK(format_bytes(8) == "8 B");
  CHECK(format_bytes(1024) == "1 KiB");
  CHECK(format_bytes(1ULL << 30) == "1 GiB");
  CHECK(format_bytes(1536) == "1.5 KiB");
}

TEST_CASE("preflight::to_hex and from_hex") {
  const unsigned char id[4] = {0x00, 0x7f, 0xab, 0xff};
  CHECK(to_hex(id, 4) == "007fabff");
  unsigned char back[4] = {};
  from_hex("007FABFF", back, 4);
  CHECK(std::equal(back, back + 4, id));
  CHECK_THROWS_AS(from_hex("007f", back, 4), sgpu::Error);
  CHECK_THROWS_AS(from_hex("zz7fabff", back, 4), sgpu::Error);
}

TEST_CASE("preflight::gate_reason: what keeps a GPU out of the next attempt") {
  struct Row {
    const char* what;
    void (*change)(GpuHealth&);
    std::string reason;  // "" usable
  };
  const Row rows[] = {
      {"healthy", [](GpuHealth&) {}, ""},
      {"health not read (no NVML): not judged", [](GpuHealth& g) { g.read = false; }, ""},
      {"off the bus", [](GpuHealth& g) { g.found = false; },
       "NVML no longer finds it at its PCI bus id (it fell off the bus)"},
      {"uncorrectable ECC errors", [](GpuHealth& g) { g.ecc_volatile_uncorrected = 2; },
       "2 uncorrectable ECC errors since the driver loaded"},
      {"two faults at once",
       [](GpuHealth& g) {
         g.retired_pages_pending = true;
         g.remap_failed = true;
       },
       "a row remapping failed: the GPU needs service; retired pages pending: the GPU needs a reset"},
      {"another process on it",
       [](GpuHealth& g) {
         g.pids = {4242, 7};
       },
       "in use by process 4242, 7, which is not the job's"},
      {"a warning is no reason: hot, or old ECC errors",
       [](GpuHealth& g) {
         g.temperature_c = 90;
         g.ecc_aggregate_uncorrected = 1;
       },
       ""},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.what));
    GpuHealth g;
    g.index = 1;
    row.change(g);
    CHECK(gate_reason(g) == row.reason);
  }
}

TEST_CASE("preflight::xid_fault: the XIDs that keep a GPU out, and those a program causes") {
  struct Row {
    unsigned long long xid;
    const char* fault;
  };
  const Row rows[] = {
      {48, "a double-bit ECC error"},
      {79, "the GPU fell off the bus"},
      {74, "an NVLink error"},
      {95, "an uncontained ECC error"},
      {64, "a failed row remap"},
      {119, "a GSP RPC timeout"},
      {13, ""},  // graphics engine exception: the program's
      {31, ""},  // MMU fault: an illegal address, the program's
      {43, ""},  // the program stopped
      {45, ""},  // preemptive cleanup: a killed program's
      {94, ""},  // contained ECC: the program is stopped, the GPU stays usable
      {0, ""},
  };
  for (const auto& row : rows) {
    CAPTURE(row.xid);
    CHECK(xid_fault(row.xid) == row.fault);
  }
}
