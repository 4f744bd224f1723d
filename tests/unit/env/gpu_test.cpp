#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/gpu.hpp"

using namespace sgpu::env;

TEST_CASE("env::normalize_gpu_type") {
  struct Row {
    const char* name;
    const char* type;
  };
  // Names as NVML and nvidia-smi report them.
  const Row rows[] = {
      {"NVIDIA H100 80GB HBM3", "H100"},
      {"NVIDIA H100 PCIe", "H100"},
      {"NVIDIA H100 NVL", "H100"},
      {"NVIDIA H200", "H200"},
      {"NVIDIA H200 NVL", "H200"},
      {"NVIDIA H800", "H800"},
      {"NVIDIA H20", "H20"},
      {"NVIDIA GH200 480GB", "GH200"},
      {"NVIDIA B200", "B200"},
      {"NVIDIA GB200", "GB200"},
      {"NVIDIA A100-SXM4-40GB", "A100"},
      {"NVIDIA A100-SXM4-80GB", "A100"},
      {"NVIDIA A100 80GB PCIe", "A100"},
      {"NVIDIA A100-PCIE-40GB", "A100"},
      {"NVIDIA A100-SXM4-40GB MIG 1g.5gb", "A100"},
      {"NVIDIA A800-SXM4-80GB", "A800"},
      {"NVIDIA A10", "A10"},
      {"NVIDIA A10G", "A10G"},
      {"NVIDIA A30", "A30"},
      {"NVIDIA A40", "A40"},
      {"NVIDIA L4", "L4"},
      {"NVIDIA L40", "L40"},
      {"NVIDIA L40S", "L40S"},
      {"Tesla V100-SXM2-16GB", "V100"},
      {"Tesla V100-SXM2-32GB", "V100"},
      {"Tesla V100-PCIE-32GB", "V100"},
      {"Tesla V100S-PCIE-32GB", "V100S"},
      {"Tesla T4", "T4"},
      {"Tesla P100-PCIE-16GB", "P100"},
      {"Tesla K80", "K80"},
      {"Quadro P4000", "P4000"},
      {"Quadro RTX 8000", "RTX8000"},
      {"NVIDIA GeForce RTX 4090", "RTX4090"},
      {"NVIDIA GeForce RTX 3080 Ti", "RTX3080TI"},
      {"NVIDIA GeForce RTX 3080 Laptop GPU", "RTX3080"},
      {"NVIDIA GeForce RTX 5090", "RTX5090"},
      {"NVIDIA GeForce GTX 1080 Ti", "GTX1080TI"},
      {"NVIDIA TITAN RTX", "TITANRTX"},
      {"NVIDIA TITAN V", "TITANV"},
      {"NVIDIA RTX A6000", "RTXA6000"},
      {"NVIDIA RTX A5000", "RTXA5000"},
      {"NVIDIA RTX 6000 Ada Generation", "RTX6000ADA"},
      {"NVIDIA RTX 4000 SFF Ada Generation", "RTX4000ADA"},
      {"NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTXPRO6000"},
      {"NVIDIA Graphics Device", "UNKNOWN"},
      {"", "UNKNOWN"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    CHECK(normalize_gpu_type(row.name) == row.type);
  }
}

TEST_CASE("env::gpu_type_matches") {
  Gpu h100;
  h100.type = "H100";
  CHECK(gpu_type_matches("H100", h100));
  CHECK(gpu_type_matches("h100", h100));
  CHECK(gpu_type_matches("NVIDIA H100 80GB HBM3", h100));
  CHECK(gpu_type_matches("nvidia-h100-80gb-hbm3", h100));  // a Kubernetes node label
  CHECK_FALSE(gpu_type_matches("H200", h100));
  CHECK_FALSE(gpu_type_matches("H10", h100));
  CHECK_FALSE(gpu_type_matches("", h100));
  Gpu rtx;
  rtx.type = "RTX4090";
  CHECK(gpu_type_matches("rtx 4090", rtx));
  CHECK(gpu_type_matches("RTX4090", rtx));
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
    CHECK_THROWS_WITH_AS(select_gpus(inv, 5, "H100"), doctest::Contains("--gpus 5: this node has only 4 visible H100"),
                         sgpu::Error);
  }
  SUBCASE("messages start with how the user asked") {
    CHECK_THROWS_WITH_AS(select_gpus(inv, 5, "H100", "job.toml:3:8: resources.gpus = 5"),
                         doctest::Contains("job.toml:3:8: resources.gpus = 5: this node has only 4"), sgpu::Error);
    CHECK_THROWS_WITH_AS(select_gpus(inv, 1, "L4", "", "--set resources.gpu_type=L4"),
                         doctest::Contains("--set resources.gpu_type=L4: this node has 2x A100, 4x H100"), sgpu::Error);
  }
  SUBCASE("no type asked: the first visible GPU's type, for every rank") {
    auto sel = select_gpus(inv, 2, "");
    CHECK(sel[0].type == "A100");
    CHECK(sel[1].type == "A100");
    CHECK_THROWS_WITH_AS(select_gpus(inv, 3, ""), doctest::Contains("only 2 visible A100 GPUs"), sgpu::Error);
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
