#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/backend.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"

using namespace sgpu::launcher;

namespace {

DryRunInputs inputs(const char* fake_gpus) {
  DryRunInputs in;
  in.nodes = {{"this node", sgpu::env::parse_fake_gpus(fake_gpus)}};
  in.backend = "local";
  in.inherited = {{"PATH", "/usr/bin"}, {"HF_TOKEN", "hf_secret"}};
  in.cwd = "/work";
  in.executable = "/usr/bin/python3";
  in.runs_root = "/runs";
  in.config = "job.toml";
  return in;
}

}  // namespace

TEST_CASE("launcher::make_dry_run on one node") {
  auto spec = resolve_spec({file_layer(R"(
[job]
entrypoint = "train.py"
[resources]
gpus = 4
gpu_bind = "per-rank"
[env]
WANDB_API_KEY = "k"
)",
                                       "job.toml")});
  auto dry = make_dry_run(spec, inputs("4xH100,2xA100"));
  REQUIRE(dry.nodes.size() == 1);
  const auto& plan = dry.nodes[0].plan;
  CHECK(dry.nodes[0].gpus_checked);
  REQUIRE(plan.ranks.size() == 4);
  CHECK(plan.gpu_type == "H100");
  SUBCASE("json") {
    auto doc = nlohmann::json::parse(dry_run_json(dry));
    CHECK(doc["world_size"] == 4);
    CHECK(doc["master_port"].is_null());
    CHECK(doc["timeout_s"] == 10800.0);
    CHECK(doc["command"] == nlohmann::json({"/usr/bin/python3", "-u", "train.py"}));
    CHECK(doc["gpu_bind"] == "per-rank");
    const auto& rank3 = doc["ranks"][3];
    CHECK(rank3["env"]["RANK"] == "3");
    CHECK(rank3["env"]["CUDA_VISIBLE_DEVICES"] == "3");
    CHECK(rank3["env"]["HF_TOKEN"] == "****");
    CHECK(rank3["env"]["WANDB_API_KEY"] == "****");
    CHECK(rank3["env"]["PATH"] == "/usr/bin");
    CHECK(rank3["env"]["MASTER_PORT"] == "<free port, reserved at launch>");
    CHECK(rank3["env"]["TORCHELASTIC_ERROR_FILE"] == "/runs/<run-id>/ranks/3/error.json");
    CHECK(rank3["devices"][0]["index"] == 3);
    bool masked_setting = false;
    for (const auto& s : doc["settings"])
      if (s["key"] == "env.WANDB_API_KEY") masked_setting = s["value"] == "****" && s["from"] == "job.toml:8:17";
    CHECK(masked_setting);
  }
  SUBCASE("text") {
    auto text = dry_run_text(dry);
    CHECK(text.find("hf_secret") == std::string::npos);
    CHECK(text.find("  rank 3    local 3   GPU 3 (H100, NVIDIA H100 (fake), 00000000:13:00.0)\n") != std::string::npos);
    CHECK(text.find("  WANDB_API_KEY=****\n") != std::string::npos);
    CHECK(text.find("  rank 2: CUDA_VISIBLE_DEVICES=2 LOCAL_RANK=2 RANK=2 ROLE_RANK=2") != std::string::npos);
  }
}

TEST_CASE("launcher::make_dry_run refuses what the launch would refuse") {
  auto spec = resolve_spec({set_layer({"resources.gpus=8", "resources.gpu_type=H100", "job.entrypoint=x.py"})});
  CHECK_THROWS_WITH_AS(make_dry_run(spec, inputs("4xH100")),
                       doctest::Contains("--set resources.gpus=8: this node has only 4 visible H100 GPUs"),
                       sgpu::Error);
  auto typed = resolve_spec({set_layer({"resources.gpus=1", "resources.gpu_type=B200", "job.entrypoint=x.py"})});
  CHECK_THROWS_WITH_AS(make_dry_run(typed, inputs("4xH100")),
                       doctest::Contains("--set resources.gpu_type=B200: this node has 4x H100"), sgpu::Error);
}

TEST_CASE("launcher::make_dry_run lays ranks out over the nodes") {
  auto spec = resolve_spec({file_layer(R"(
[job]
entrypoint = "train.py"
[resources]
backend = "ssh"
nodes = 2
gpus = 16
gpu_type = "h100"
[ssh]
hosts = ["alice@gpu-a:8", "gpu-b:8"]
)",
                                       "job.toml")});
  // The ssh backend lays the job out over its hosts; this node's GPUs play no part.
  LaunchContext ctx;
  ctx.spec = spec.spec;
  ctx.cwd = "/work";
  auto backend = find_backend("ssh")->make();
  backend->check(ctx);
  auto layout = backend->describe(ctx);
  auto in = inputs("1xL4");
  in.nodes = layout.nodes;
  in.master_addr = layout.master_addr;
  auto dry = make_dry_run(spec, in);
  REQUIRE(dry.nodes.size() == 2);
  CHECK(dry.nodes[0].host == "gpu-a");
  CHECK(dry.nodes[1].host == "gpu-b");
  CHECK_FALSE(dry.nodes[1].gpus_checked);
  const auto& r9 = dry.nodes[1].plan.ranks[1];
  CHECK(r9.env.at("RANK") == "9");
  CHECK(r9.env.at("LOCAL_RANK") == "1");
  CHECK(r9.env.at("WORLD_SIZE") == "16");
  CHECK(r9.env.at("NODE_RANK") == "1");
  CHECK(r9.env.at("NNODES") == "2");
  CHECK(r9.env.at("MASTER_ADDR") == "gpu-a");
  CHECK(r9.env.at("SGPU_GPU_TYPE") == "H100");
  CHECK(r9.env.at("CUDA_VISIBLE_DEVICES") == "0,1,2,3,4,5,6,7");
  CHECK_FALSE(r9.env.contains("HF_TOKEN"));  // a remote rank does not inherit this node's environment
}
