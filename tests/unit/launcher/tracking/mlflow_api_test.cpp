#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <unistd.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tracking/http_client.hpp"
#include "tracking/mlflow_api.hpp"
#include "tracking/mlflow_run.hpp"

using namespace sgpu::launcher;
using namespace sgpu::launcher::mlflow;
using json = nlohmann::json;

namespace {
ServerUrl local() { return *parse_server_url("http://127.0.0.1:5000"); }
}  // namespace

TEST_CASE("mlflow::parse_server_url") {
  struct Row {
    const char* uri;
    bool ok;
    bool tls;
    const char* host;
    int port;
    const char* base;
    const char* display;
  };
  const Row rows[] = {
      {"http://127.0.0.1:5000", true, false, "127.0.0.1", 5000, "", "http://127.0.0.1:5000"},
      {"https://mlflow.example.com", true, true, "mlflow.example.com", 443, "", "https://mlflow.example.com"},
      {"http://host", true, false, "host", 80, "", "http://host"},
      {"HTTP://Host:8080/", true, false, "Host", 8080, "", "http://Host:8080"},
      {"https://h:8443/mlflow/", true, true, "h", 8443, "/mlflow", "https://h:8443/mlflow"},
      {"http://user:pw@h:5000/x?q=1#f", true, false, "h", 5000, "/x", "http://h:5000/x"},
      {"http://[::1]:5000", true, false, "::1", 5000, "", "http://[::1]:5000"},
      {"file:///tmp/mlruns", false, false, "", 0, "", ""},
      {"databricks", false, false, "", 0, "", ""},
      {"/tmp/mlruns", false, false, "", 0, "", ""},
      {"http://", false, false, "", 0, "", ""},
      {"http://:5000", false, false, "", 0, "", ""},
      {"http://h:0", false, false, "", 0, "", ""},
      {"http://h:70000", false, false, "", 0, "", ""},
      {"http://h:5x", false, false, "", 0, "", ""},
      {"http://[::1", false, false, "", 0, "", ""},
  };
  for (const auto& row : rows) {
    CAPTURE(row.uri);
    auto url = parse_server_url(row.uri);
    REQUIRE(url.has_value() == row.ok);
    if (!url) continue;
    CHECK(url->tls == row.tls);
    CHECK(url->host == row.host);
    CHECK(url->port == row.port);
    CHECK(url->base_path == row.base);
    CHECK(url->display() == row.display);
  }
}

TEST_CASE("mlflow requests") {
  auto prefixed = *parse_server_url("http://h:5000/p");
  SUBCASE("get-by-name encodes the name") {
    auto r = get_experiment_by_name(prefixed, "my exp/1&x");
    CHECK(r.method == "GET");
    CHECK(r.target == "/p/api/2.0/mlflow/experiments/get-by-name?experiment_name=my%20exp%2F1%26x");
    CHECK(r.body.empty());
  }
  SUBCASE("create experiment") {
    auto r = create_experiment(local(), "exp");
    CHECK(r.method == "POST");
    CHECK(r.target == "/api/2.0/mlflow/experiments/create");
    CHECK(r.content_type == "application/json");
    CHECK(json::parse(r.body) == json{{"name", "exp"}});
  }
  SUBCASE("create run: tags, name, start time") {
    auto r = create_run(local(), "3", "run-1", 1700000000123, {{"sgpu.run_id", "abc"}, {"mlflow.user", "me"}});
    CHECK(r.target == "/api/2.0/mlflow/runs/create");
    CHECK(json::parse(r.body) == json::parse(R"({"experiment_id": "3", "start_time": 1700000000123, "run_name": "run-1",
        "tags": [{"key": "sgpu.run_id", "value": "abc"}, {"key": "mlflow.user", "value": "me"}]})"));
  }
  SUBCASE("create run without a name lets the server pick one") {
    CHECK_FALSE(json::parse(create_run(local(), "0", "", 1, {}).body).contains("run_name"));
  }
  SUBCASE("update run") {
    auto r = update_run(local(), "r1", "KILLED", 99);
    CHECK(r.target == "/api/2.0/mlflow/runs/update");
    CHECK(json::parse(r.body) == json{{"run_id", "r1"}, {"status", "KILLED"}, {"end_time", 99}});
  }
  SUBCASE("get run") { CHECK(get_run(local(), "a b").target == "/api/2.0/mlflow/runs/get?run_id=a%20b"); }
  SUBCASE("text that is not UTF-8 still makes valid JSON") {
    auto r = create_run(local(), "0", "bad\xff", 1, {});
    CHECK_FALSE(json::parse(r.body, nullptr, false).is_discarded());
  }
}

TEST_CASE("mlflow::log_batches") {
  SUBCASE("one batch: metrics with steps, params, tags") {
    auto batches = log_batches(local(), "r", {{"m", 1.5, 10, 2}}, {{"p", "v"}}, {{"t", "u"}});
    REQUIRE(batches.size() == 1);
    CHECK(batches[0].target == "/api/2.0/mlflow/runs/log-batch");
    CHECK(json::parse(batches[0].body) == json::parse(R"({"run_id": "r",
        "metrics": [{"key": "m", "value": 1.5, "timestamp": 10, "step": 2}],
        "params": [{"key": "p", "value": "v"}], "tags": [{"key": "t", "value": "u"}]})"));
  }
  SUBCASE("nothing to log is still one (empty) call") { CHECK(log_batches(local(), "r", {}, {}, {}).size() == 1); }
  SUBCASE("over MLflow's limits: 250 params in three calls, 2500 metrics in three") {
    KeyValues params;
    for (int i = 0; i < 250; ++i) params.emplace_back("p" + std::to_string(i), "v");
    std::vector<Metric> metrics(2500, Metric{"m", 1, 1, 0});
    auto batches = log_batches(local(), "r", metrics, params, {});
    REQUIRE(batches.size() == 3);
    CHECK(json::parse(batches[0].body)["params"].size() == 100);
    CHECK(json::parse(batches[2].body)["params"].size() == 50);
    CHECK(json::parse(batches[0].body)["metrics"].size() == 1000);
    CHECK(json::parse(batches[2].body)["metrics"].size() == 500);
  }
  SUBCASE("a long param value is cut at a character boundary") {
    std::string accents;
    for (int i = 0; i < 4000; ++i) accents += "\xc3\xa9";
    auto body = json::parse(log_batches(local(), "r", {}, {{"p", accents}}, {})[0].body);
    auto cut = body["params"][0]["value"].get<std::string>();
    CHECK(cut.size() == 6000);
    CHECK(cut == accents.substr(0, 6000));
  }
}

TEST_CASE("mlflow::upload_artifact") {
  struct Row {
    const char* artifact_uri;
    const char* path;
    const char* target;  // "" for none
  };
  const Row rows[] = {
      {"mlflow-artifacts:/1/abc/artifacts", "summary.json",
       "/api/2.0/mlflow-artifacts/artifacts/1/abc/artifacts/summary.json"},
      {"mlflow-artifacts:/1/abc/artifacts/", "ranks/0/stdout",
       "/api/2.0/mlflow-artifacts/artifacts/1/abc/artifacts/ranks/0/stdout"},
      {"mlflow-artifacts://other:5000/2/r/artifacts", "a b", "/api/2.0/mlflow-artifacts/artifacts/2/r/artifacts/a%20b"},
      {"mlflow-artifacts:/", "x", "/api/2.0/mlflow-artifacts/artifacts/x"},
      {"s3://bucket/1/abc/artifacts", "x", ""},
      {"file:///tmp/mlruns/1/abc/artifacts", "x", ""},
      {"", "x", ""},
  };
  for (const auto& row : rows) {
    CAPTURE(row.artifact_uri);
    auto r = upload_artifact(local(), row.artifact_uri, row.path, "bytes");
    REQUIRE(r.has_value() == (row.target[0] != '\0'));
    if (!r) continue;
    CHECK(r->method == "PUT");
    CHECK(r->target == row.target);
    CHECK(r->body == "bytes");
  }
}

TEST_CASE("mlflow::response_error") {
  struct Row {
    const char* what;
    int status;
    const char* body;
    bool error;
    const char* code;
    const char* message;
  };
  const Row rows[] = {
      {"success", 200, "{}", false, "", ""},
      {"MLflow's error", 404, R"({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "Could not find experiment"})",
       true, "RESOURCE_DOES_NOT_EXIST", "Could not find experiment"},
      {"a proxy's HTML page: its first line", 502, "<html>Bad Gateway\nmore</html>", true, "", "<html>Bad Gateway"},
      {"empty body", 401, "", true, "", ""},
      {"fields of other types", 500, R"({"error_code": 5, "message": ["x"]})", true, "", ""},
      {"control characters become spaces", 500,
       "a\tb\x01"
       "c",
       true, "", "a b c"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    auto e = response_error({row.status, row.body});
    REQUIRE(e.has_value() == row.error);
    if (!e) continue;
    CHECK(e->code == row.code);
    CHECK(e->message == row.message);
  }
  SUBCASE("a long message is cut to 200 characters") {
    CHECK(response_error({500, std::string(1000, 'x')})->message.size() == 200);
  }
}

TEST_CASE("mlflow::parse_experiment_id") {
  CHECK(parse_experiment_id(R"({"experiment_id": "7"})") == "7");
  CHECK(parse_experiment_id(R"({"experiment": {"experiment_id": "0", "name": "Default"}})") == "0");
  CHECK_FALSE(parse_experiment_id(R"({"experiment_id": 7})"));
  CHECK_FALSE(parse_experiment_id(R"({"experiment_id": ""})"));
  CHECK_FALSE(parse_experiment_id(R"({"experiment": []})"));
  CHECK_FALSE(parse_experiment_id("not json"));
  CHECK_FALSE(parse_experiment_id("[]"));
}

TEST_CASE("mlflow::parse_run_info") {
  SUBCASE("runs/create's answer") {
    auto info = parse_run_info(
        R"({"run": {"info": {"run_id": "abc", "run_uuid": "abc", "experiment_id": "1",
            "artifact_uri": "mlflow-artifacts:/1/abc/artifacts", "status": "RUNNING"}, "data": {}}})");
    REQUIRE(info);
    CHECK(info->run_id == "abc");
    CHECK(info->experiment_id == "1");
    CHECK(info->artifact_uri == "mlflow-artifacts:/1/abc/artifacts");
  }
  SUBCASE("an old server's run_uuid") {
    CHECK(parse_run_info(R"({"run": {"info": {"run_uuid": "u", "experiment_id": "1"}}})")->run_id == "u");
  }
  SUBCASE("not a run") {
    for (const char* body : {"", "{}", R"({"run": 1})", R"({"run": {"info": {"run_id": "a"}}})",
                             R"({"run": {"info": {"run_id": 1, "experiment_id": "1"}}})", "\xff\xfe"}) {
      CAPTURE(body);
      CHECK_FALSE(parse_run_info(body));
    }
  }
}

TEST_CASE("mlflow::run_status") {
  using Kind = sgpu::env::JobEnd::Kind;
  CHECK(run_status(Kind::Completed) == "FINISHED");
  CHECK(run_status(Kind::RankFailed) == "FAILED");
  CHECK(run_status(Kind::SpawnFailed) == "FAILED");
  CHECK(run_status(Kind::NodeLost) == "FAILED");
  CHECK(run_status(Kind::TimedOut) == "KILLED");
  CHECK(run_status(Kind::Interrupted) == "KILLED");
}

TEST_CASE("mlflow::run_link") {
  CHECK(run_link(local(), "3", "abc") == "http://127.0.0.1:5000/#/experiments/3/runs/abc");
  CHECK(run_link(*parse_server_url("https://h/mlflow/"), "0", "r") == "https://h/mlflow/#/experiments/0/runs/r");
}

TEST_CASE("mlflow::authorization") {
  CHECK(authorization("", "", "").empty());
  CHECK(authorization("tok", "", "") == "Bearer tok");
  CHECK(authorization("tok", "user", "pw") == "Bearer tok");
  CHECK(authorization("", "user", "pw") == "Basic dXNlcjpwdw==");
  CHECK(authorization("", "admin", "password1234") == "Basic YWRtaW46cGFzc3dvcmQxMjM0");
  CHECK(authorization("", "a", "") == "Basic YTo=");
}

TEST_CASE("mlflow::scrub") {
  CHECK(scrub("bad token abc, abc", "abc") == "bad token ****, ****");
  CHECK(scrub("nothing", "") == "nothing");
  CHECK(scrub("aaaa", "aa") == "********");
}

TEST_CASE("mlflow::run_tags and run_params") {
  RunDescription job;
  job.sgpu_run_id = "20261203-abc";
  job.host = "node1";
  job.user = "me";
  job.entrypoint.target = "train.py";
  job.entrypoint.args = {"--token", "t0k", "--epochs", "3"};
  job.backend = "local";
  job.world_size = 8;
  job.gpus = 8;
  job.gpu_type = "H100";
  job.timeout = "3h";
  job.spec_env = {{"WANDB_API_KEY", "k"}, {"NCCL_DEBUG", "INFO"}};
  SUBCASE("tags") {
    auto tags = run_tags(job, "0123", "parent");
    CHECK(tags == KeyValues{{"sgpu.run_id", "20261203-abc"},
                            {"sgpu.host", "node1"},
                            {"mlflow.user", "me"},
                            {"mlflow.source.name", "train.py"},
                            {"mlflow.source.type", "LOCAL"},
                            {"mlflow.source.git.commit", "0123"},
                            {"mlflow.parentRunId", "parent"}});
    CHECK(run_tags(job, "", "").size() == 5);
  }
  SUBCASE("params: the resolved spec, secrets masked") {
    auto params = run_params(job);
    auto value = [&](const std::string& key) {
      for (const auto& [k, v] : params)
        if (k == key) return v;
      return std::string("<absent>");
    };
    CHECK(value("sgpu.args") == "--token '****' --epochs 3");
    CHECK(value("sgpu.world_size") == "8");
    CHECK(value("sgpu.gpu_type") == "H100");
    CHECK(value("sgpu.entrypoint") == "train.py");
    CHECK(value("sgpu.entrypoint_kind") == "script");
    CHECK(value("sgpu.env.WANDB_API_KEY") == "****");
    CHECK(value("sgpu.env.NCCL_DEBUG") == "INFO");
  }
}

TEST_CASE("mlflow::end_metrics") {
  RunEnd end;
  end.exit_code = 7;
  end.started = Clock::time_point(std::chrono::seconds(100));
  end.ended = Clock::time_point(std::chrono::milliseconds(102500));
  end.ranks = {{0, 10, {}, false, end.started, end.started + std::chrono::seconds(2)},
               {1, 11, {}, false, end.started, end.started + std::chrono::milliseconds(1500)},
               {2, -1, {}, false, {}, {}}};  // never started: no duration
  auto metrics = end_metrics(end);
  REQUIRE(metrics.size() == 4);
  CHECK(metrics[0].key == "sgpu.wall_time_s");
  CHECK(metrics[0].value == doctest::Approx(2.5));
  CHECK(metrics[0].timestamp_ms == 102500);
  CHECK(metrics[1].key == "sgpu.exit_code");
  CHECK(metrics[1].value == 7);
  CHECK(metrics[2].key == "sgpu.rank_duration_s");
  CHECK(metrics[2].step == 0);
  CHECK(metrics[2].value == doctest::Approx(2));
  CHECK(metrics[3].step == 1);
  CHECK(metrics[3].value == doctest::Approx(1.5));
  CHECK(end_tags(end).empty());  // nothing left out: no tag, no count
}

TEST_CASE("mlflow::end_tags and the excluded count: the GPUs the health gate left out") {
  struct Row {
    std::vector<Exclusion> excluded;
    const char* tag;
  };
  const Row rows[] = {
      {{{"", 1, "2 uncorrectable ECC errors since the driver loaded", 0}},
       "GPU 1: 2 uncorrectable ECC errors since the driver loaded (attempt 0 on)"},
      {{{"gpu-b", 3, "fell off the bus", 1}, {"gpu-a", 0, "held by pid 77 (python3)", 2}},
       "gpu-b GPU 3: fell off the bus (attempt 1 on)\ngpu-a GPU 0: held by pid 77 (python3) (attempt 2 on)"},
      {{{"node2", -1, "the node was lost: its agent was killed by SIGKILL", 1}},
       "node2: the node was lost: its agent was killed by SIGKILL (attempt 1 on)"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.tag);
    RunEnd end;
    end.excluded = row.excluded;
    auto tags = end_tags(end);
    REQUIRE(tags.size() == 1);
    CHECK(tags[0].first == "sgpu.excluded");
    CHECK(tags[0].second == row.tag);
    auto metrics = end_metrics(end);
    bool node = row.excluded.front().gpu < 0;  // a lost node a spare replaced (--spares)
    REQUIRE(metrics.back().key == (node ? "sgpu.excluded_nodes" : "sgpu.excluded_gpus"));
    CHECK(metrics.back().value == static_cast<double>(row.excluded.size()));
  }
}

TEST_CASE("mlflow::git_commit") {
  namespace fs = std::filesystem;
  auto root = fs::temp_directory_path() / ("sgpu-git-" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto write = [](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  };
  std::string a(40, 'a');
  std::string b(40, 'b');
  SUBCASE("a branch's loose ref, from a subdirectory") {
    write(root / "repo/.git/HEAD", "ref: refs/heads/main\n");
    write(root / "repo/.git/refs/heads/main", a + "\n");
    fs::create_directories(root / "repo/src/deep");
    CHECK(git_commit((root / "repo/src/deep").string()) == a);
  }
  SUBCASE("packed refs") {
    write(root / "repo/.git/HEAD", "ref: refs/heads/main\n");
    write(root / "repo/.git/packed-refs", "# pack-refs with: peeled\n" + b + " refs/heads/main\n");
    CHECK(git_commit((root / "repo").string()) == b);
  }
  SUBCASE("detached HEAD") {
    write(root / "repo/.git/HEAD", a + "\n");
    CHECK(git_commit((root / "repo").string()) == a);
  }
  SUBCASE("a worktree: .git is a file, refs are in the common directory") {
    write(root / "main/.git/refs/heads/topic", b + "\n");
    write(root / "main/.git/worktrees/wt/HEAD", "ref: refs/heads/topic\n");
    write(root / "main/.git/worktrees/wt/commondir", "../..\n");
    write(root / "wt/.git", "gitdir: " + (root / "main/.git/worktrees/wt").string() + "\n");
    CHECK(git_commit((root / "wt").string()) == b);
  }
  SUBCASE("not a repository") {
    fs::create_directories(root / "plain");
    CHECK(git_commit((root / "plain").string()).empty());
  }
  fs::remove_all(root);
}

TEST_CASE("mlflow::masked_artifact") {
  SUBCASE("spec.json: the [env] secrets") {
    auto out = json::parse(masked_artifact("spec.json", R"({"env": {"HF_TOKEN": "t", "A": "b"}, "x": 1})"));
    CHECK(out["env"]["HF_TOKEN"] == "****");
    CHECK(out["env"]["A"] == "b");
    CHECK(out["x"] == 1);
  }
  SUBCASE("summary.json as written: spec_json masked its spec, and its results stay compact") {
    const char* summary = R"({"spec": {"env": {"DB_PASSWORD": "****"}}, "results": [[0,0,0]]})";
    CHECK(masked_artifact("summary.json", summary) == summary);
  }
  SUBCASE("anything else as it is") {
    CHECK(masked_artifact("ranks/0/stdout", R"({"env": {"HF_TOKEN": "t"}})") == R"({"env": {"HF_TOKEN": "t"}})");
    CHECK(masked_artifact("spec.json", "not json") == "not json");
    CHECK(masked_artifact("summary.json", R"({"spec": null})") == R"({"spec": null})");
  }
}

TEST_CASE("mlflow::sample_metrics: MLflow's own GPU names, the node in them on several nodes, each rank's") {
  NodeSample s;
  s.time = Clock::time_point(std::chrono::milliseconds(1700000000123));
  s.host = "gpu-b.cluster";
  GpuSample g;
  g.index = 1;
  g.utilization_percent = 97;
  g.memory_used_bytes = 40'000'000'000ULL;
  g.memory_total_bytes = 80'000'000'000ULL;
  g.power_watts = 350;
  g.power_limit_watts = 700;
  s.gpus.push_back(g);
  GpuSample bare;  // what NVML did not give is not logged
  bare.index = 2;
  s.gpus.push_back(bare);
  RankSample r;
  r.rank = 5;
  r.cpu_percent = 99.5;
  r.rss_bytes = 2'000'000'000ULL;
  r.step_rate = 3.25;
  s.ranks.push_back(r);
  RankSample first;  // its first sample: no CPU figure, no rate yet
  first.rank = 6;
  first.rss_bytes = 1'000'000;
  s.ranks.push_back(first);
  struct Row {
    bool several;
    std::vector<std::pair<std::string, double>> expected;
  };
  std::vector<Row> rows = {
      {false,
       {{"system/gpu_1_utilization_percentage", 97},
        {"system/gpu_1_memory_usage_megabytes", 40000},
        {"system/gpu_1_memory_usage_percentage", 50},
        {"system/gpu_1_power_usage_watts", 350},
        {"system/gpu_1_power_usage_percentage", 50},
        {"system/rank_5_cpu_utilization_percentage", 99.5},
        {"system/rank_5_memory_usage_megabytes", 2000},
        {"system/rank_5_step_rate", 3.25},
        {"system/rank_6_memory_usage_megabytes", 1}}},
      {true,
       {{"system/gpu-b.cluster_gpu_1_utilization_percentage", 97},
        {"system/gpu-b.cluster_gpu_1_memory_usage_megabytes", 40000},
        {"system/gpu-b.cluster_gpu_1_memory_usage_percentage", 50},
        {"system/gpu-b.cluster_gpu_1_power_usage_watts", 350},
        {"system/gpu-b.cluster_gpu_1_power_usage_percentage", 50},
        {"system/rank_5_cpu_utilization_percentage", 99.5},
        {"system/rank_5_memory_usage_megabytes", 2000},
        {"system/rank_5_step_rate", 3.25},
        {"system/rank_6_memory_usage_megabytes", 1}}},
  };
  for (const auto& row : rows) {
    auto metrics = sample_metrics(s, row.several, 7);
    REQUIRE(metrics.size() == row.expected.size());
    for (std::size_t i = 0; i < metrics.size(); ++i) {
      CAPTURE(row.expected[i].first);
      CHECK(metrics[i].key == row.expected[i].first);
      CHECK(metrics[i].value == doctest::Approx(row.expected[i].second));
      CHECK(metrics[i].step == 7);
      CHECK(metrics[i].timestamp_ms == 1700000000123);
    }
  }
}

TEST_CASE("mlflow::system_ca_bundle: the first bundle this distribution has") {
  struct Row {
    std::set<std::string> present;
    const char* chosen;
  };
  const Row rows[] = {
      {{"/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/cert.pem"}, "/etc/ssl/certs/ca-certificates.crt"},  // Debian
      {{"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/pki/tls/certs/ca-bundle.crt"},
       "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem"},  // Rocky 8
      {{"/etc/pki/tls/certs/ca-bundle.crt"}, "/etc/pki/tls/certs/ca-bundle.crt"},
      {{"/etc/ssl/ca-bundle.pem"}, "/etc/ssl/ca-bundle.pem"},  // SUSE
      {{"/etc/ssl/cert.pem"}, "/etc/ssl/cert.pem"},            // Alpine
      {{}, ""},                                                // none: OpenSSL's defaults alone
  };
  for (const auto& row : rows) {
    CAPTURE(row.chosen);
    CHECK(system_ca_bundle([&](const std::string& p) { return row.present.count(p) > 0; }) == row.chosen);
  }
}
