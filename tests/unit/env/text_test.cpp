#include <doctest/doctest.h>

#include "sgpu/env/secrets.hpp"
#include "sgpu/env/suggest.hpp"

using namespace sgpu::env;

TEST_CASE("env::edit_distance") {
  struct Row {
    const char* a;
    const char* b;
    int distance;
  };
  const Row rows[] = {
      {"gpus", "gpus", 0},
      {"gpu", "gpus", 1},
      {"gpu-type", "gpu_type", 0},
      {"GPUS", "gpus", 0},
      {"resourcse", "resources", 1},
      {"pyhton", "python", 1},
      {"", "abc", 3},
      {"nproc", "nodes", 4},
  };
  for (const auto& row : rows) {
    CAPTURE(row.a);
    CAPTURE(row.b);
    CHECK(edit_distance(row.a, row.b) == row.distance);
  }
}

TEST_CASE("env::closest_match") {
  std::vector<std::string> keys = {"gpus", "gpus_per_node", "nproc", "gpu_type", "nodes"};
  CHECK(closest_match("gpu", keys) == "gpus");
  CHECK(closest_match("gputype", keys) == "gpu_type");
  CHECK(closest_match("nprocs", keys) == "nproc");
  CHECK(closest_match("timeout", keys).empty());  // nothing near: no guess
  CHECK(closest_match("x", keys).empty());
}

TEST_CASE("env::mask_secret") {
  struct Row {
    const char* name;
    const char* value;
    const char* shown;
  };
  const Row rows[] = {
      {"HF_TOKEN", "hf_abc", "****"},
      {"WANDB_API_KEY", "123", "****"},
      {"AWS_SECRET_ACCESS_KEY", "x", "****"},
      {"MLFLOW_TRACKING_PASSWORD", "pw", "****"},
      {"db_password", "pw", "****"},
      {"GOOGLE_APPLICATION_CREDENTIALS", "/k.json", "****"},
      {"SSH_AUTH_SOCK", "/tmp/a", "****"},
      {"EMPTY_TOKEN", "", ""},
      {"PATH", "/usr/bin", "/usr/bin"},
      {"MASTER_ADDR", "10.0.0.1", "10.0.0.1"},
      {"MLFLOW_TRACKING_URI", "https://bob:hunter2@mlflow.example:5000/x", "https://bob:****@mlflow.example:5000/x"},
      {"PIP_INDEX_URL", "https://user@pypi.example/simple", "https://user@pypi.example/simple"},
      {"MIRRORS", "http://a:1@h/ http://b:2@g", "http://a:****@h/ http://b:****@g"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    CHECK(mask_secret(row.name, row.value) == row.shown);
  }
}
