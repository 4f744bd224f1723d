#include <string>
#include <vector>

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
      {"GITHUB_PAT", "ghp_x", "****"},
      {"gh-pat", "x", "****"},
      {"SSHPASS", "pw", "****"},
      {"DB_PASS", "pw", "****"},
      {"NETRC", "/home/u/.netrc", "****"},
      {"MYSQL_PWD", "pw", "****"},
      {"SENTRY_DSN", "https://k@o.ingest/1", "****"},
      {"SLACK_WEBHOOK_URL", "https://hooks/x", "****"},
      {"AWS_CREDS", "x", "****"},
      {"PWD", "/work", "/work"},
      {"OLDPWD", "/work", "/work"},
      {"LD_LIBRARY_PATH", "/usr/lib", "/usr/lib"},
      {"PATCH_LEVEL", "3", "3"},
      {"NUM_PASSES", "3", "3"},
      {"PASSPORT_DIR", "/p", "/p"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.name);
    CHECK(mask_secret(row.name, row.value) == row.shown);
  }
}

TEST_CASE("env::mask_arguments") {
  struct Row {
    std::vector<std::string> args;
    std::vector<std::string> shown;
  };
  const Row rows[] = {
      {{"--epochs", "3"}, {"--epochs", "3"}},
      {{"--api-key", "s3cr3t", "--lr", "0.1"}, {"--api-key", "****", "--lr", "0.1"}},
      {{"--token", "t", "--password", "p"}, {"--token", "****", "--password", "****"}},
      {{"--hf_token=abc"}, {"--hf_token=****"}},
      {{"--github-pat", "x"}, {"--github-pat", "****"}},
      {{"-p", "x"}, {"-p", "x"}},
      {{"--pass", "x", "--passes", "3"}, {"--pass", "****", "--passes", "3"}},
      {{"db.password=x", "trainer.lr=0.1"}, {"db.password=****", "trainer.lr=0.1"}},
      {{"HF_TOKEN=x", "python", "t.py"}, {"HF_TOKEN=****", "python", "t.py"}},
      {{"--db", "postgres://u:pw@h/db"}, {"--db", "postgres://u:****@h/db"}},
      {{"token"}, {"token"}},  // a word, not an option
      {{"a token=x in a sentence"}, {"a token=x in a sentence"}},
      {{"--password"}, {"--password"}},
      {{}, {}},
  };
  for (const auto& row : rows) {
    CAPTURE(row.args.size());
    CHECK(mask_arguments(row.args) == row.shown);
  }
}
