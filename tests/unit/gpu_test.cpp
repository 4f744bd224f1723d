#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/gpu.hpp"

using namespace sgpu::env;

TEST_CASE("env::normalize_gpu_type") {
  struct Row {
    const char* name;
    const char* type;
  };
  const Row rows[] = {
      {"NVIDIA H100 80GB HBM3", "H100"},
      {"NVIDIA H100 PCIe", "H100"},
      {"NVIDIA H200", "H200"},
      {"NVIDIA A100-SXM4-40GB", "A100"},
      {"NVIDIA A100 80GB PCIe", "A100"},
      {"NVIDIA A10", "A10"},
      {"NVIDIA A10G", "A10G"},
      {"NVIDIA L4", "L4"},
      {"NVIDIA L40S", "L40S"},
      {"Tesla V100-SXM2-16GB", "V100"},
      {"Tesla T4", "T4"},
      {"NVIDIA B200", "B200"},
      {"NVIDIA GB200", "GB200"},
      {"NVIDIA GH200 480GB", "GH200"},
      {"NVIDIA GeForce RTX 4090", "RTX4090"},
      {"NVIDIA RTX A6000", "RTXA6000"},
      {"NVIDIA RTX 6000 Ada Generation", "RTX6000ADA"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    CHECK(normalize_gpu_type(row.name) == row.type);
  }
}

TEST_CASE("env::select_gpus") {
  auto inv = parse_fake_gpus("2xA100,4xH100");
  REQUIRE(inv.size() == 6);
  CHECK(inv[2].type == "H100");
  CHECK(gpu_type_matches("h100", inv[2]));

  SUBCASE("type given picks matching GPUs in order") {
    auto sel = select_gpus(inv, 3, "h100");
    REQUIRE(sel.size() == 3);
    CHECK(sel[0].index == 2);
    CHECK(sel[2].index == 4);
  }
  SUBCASE("mismatch names what the node has") {
    try {
      select_gpus(inv, 1, "B200");
      FAIL("accepted");
    } catch (const sgpu::Error& e) {
      CHECK(std::string(e.what()).find("2x A100, 4x H100") != std::string::npos);
    }
  }
  SUBCASE("too many") {
    CHECK_THROWS_WITH_AS(select_gpus(inv, 5, "H100"), doctest::Contains("only 4 visible H100"), sgpu::Error);
  }
  SUBCASE("CUDA_VISIBLE_DEVICES is the pool") {
    auto vis = apply_cuda_visible_devices(inv, std::string("5,3"));
    auto sel = select_gpus(vis, 2, "");
    CHECK(sel[0].index == 5);
    CHECK(sel[1].index == 3);
    CHECK_THROWS_AS(select_gpus(vis, 3, ""), sgpu::Error);
  }
  SUBCASE("CUDA_VISIBLE_DEVICES stops at an invalid entry, like CUDA") {
    auto vis = apply_cuda_visible_devices(inv, std::string("1,9,2"));
    int visible = 0;
    for (auto& g : vis) visible += g.visible;
    CHECK(visible == 1);
  }
  SUBCASE("UUIDs") {
    auto vis = apply_cuda_visible_devices(inv, std::string("GPU-fake-0004"));
    CHECK(vis.front().index == 4);
    CHECK(vis.front().visible);
  }
  SUBCASE("bad fake spec") {
    CHECK_THROWS_AS(parse_fake_gpus("eightxH100"), sgpu::Error);
    CHECK(parse_fake_gpus("4").size() == 4);
  }
}
