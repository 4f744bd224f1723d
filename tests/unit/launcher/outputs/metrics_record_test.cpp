// What the launcher keeps of the nodes' samples: metrics.jsonl's lines, the
// straggler warning and event, and /metrics' text.
#include <doctest/doctest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sgpu/launcher/outputs/metrics_record.hpp"

using namespace sgpu::launcher;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("sgpu-metrics-test-" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

NodeSample sample(const std::string& host, std::vector<std::pair<int, double>> rates) {
  NodeSample s;
  s.time = Clock::now();
  s.host = host;
  for (auto [rank, rate] : rates) {
    RankSample r;
    r.rank = rank;
    r.pid = 1000 + rank;
    r.cpu_percent = 99.5;
    r.rss_bytes = 1 << 20;
    r.threads = 3;
    r.state = 'R';
    r.step = 10;
    r.step_rate = rate;
    r.progress_age_s = 0.25;
    s.ranks.push_back(r);
  }
  return s;
}

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

}  // namespace

TEST_CASE("each sample appends a line per rank and per GPU to metrics.jsonl") {
  TempDir dir;
  std::vector<std::string> warnings;
  MetricsRecorder rec(
      dir.path.string(), "run1", "a", {"", ""}, 1.5, [&](const std::string& w) { warnings.push_back(w); },
      [](const nlohmann::ordered_json&) {});
  auto s = sample("a", {{0, 2.0}, {1, 2.0}});
  GpuSample g;
  g.index = 0;
  g.uuid = "GPU-1";
  g.utilization_percent = 40;
  g.memory_used_bytes = 512;
  g.ranks = {0};
  s.gpus.push_back(g);
  rec.on_sample(s);
  rec.on_sample(s);
  auto lines = lines_of(dir.path / "metrics.jsonl");
  REQUIRE(lines.size() == 6);
  auto first = nlohmann::json::parse(lines[0]);
  CHECK(first["rank"] == 0);
  CHECK(first["host"] == "a");
  CHECK(first["cpu_percent"] == 99.5);
  CHECK(first["step_rate"] == 2.0);
  CHECK(first["state"] == "R");
  auto gpu = nlohmann::json::parse(lines[2]);
  CHECK(gpu["gpu"] == 0);
  CHECK(gpu["utilization_percent"] == 40);
  CHECK(gpu["power_watts"].is_null());  // what NVML did not say is null, not 0
  CHECK(warnings.empty());
}

TEST_CASE("a straggler is warned of once, with an event, and marked for /metrics") {
  TempDir dir;
  std::vector<std::string> warnings;
  std::vector<nlohmann::ordered_json> events;
  MetricsRecorder rec(
      dir.path.string(), "run1", "here", {"a", "a", "b", "b"}, 1.5,
      [&](const std::string& w) { warnings.push_back(w); },
      [&](const nlohmann::ordered_json& e) { events.push_back(e); });
  for (int i = 0; i < 4; ++i) {
    rec.on_sample(sample("a", {{0, 10}, {1, 10}}));
    rec.on_sample(sample("b", {{2, 4}, {3, 10}}));
  }
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("rank 2 (b) is a straggler: 4.00 steps/s") != std::string::npos);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["event"] == "straggler");
  CHECK(events[0]["rank"] == 2);
  CHECK(events[0]["median_step_rate"] == 10);
  auto text = prometheus_text(rec.state(), Clock::now());
  CHECK(text.find("sgpu_rank_straggler{run=\"run1\",rank=\"2\",node=\"b\"} 1\n") != std::string::npos);
  CHECK(text.find("sgpu_rank_straggler{run=\"run1\",rank=\"0\",node=\"a\"} 0\n") != std::string::npos);
  // A restart forgets it.
  rec.on_attempt_started(1);
  text = prometheus_text(rec.state(), Clock::now());
  CHECK(text.find("sgpu_rank_straggler{run=\"run1\",rank=\"2\",node=\"b\"} 0\n") != std::string::npos);
  CHECK(text.find("sgpu_run_attempt{run=\"run1\"} 1\n") != std::string::npos);
}

TEST_CASE("no straggler warnings when the factor is off") {
  TempDir dir;
  int warned = 0;
  MetricsRecorder rec(
      dir.path.string(), "r", "a", {"", ""}, 0, [&](const std::string&) { ++warned; },
      [](const nlohmann::ordered_json&) {});
  for (int i = 0; i < 4; ++i) rec.on_sample(sample("a", {{0, 10}, {1, 1}}));
  CHECK(warned == 0);
}

TEST_CASE("/metrics: every family has HELP and TYPE, labels are escaped, output bytes count") {
  TempDir dir;
  MetricsRecorder rec(
      dir.path.string(), "r\"1", "h\\1", {""}, 1.5, [](const std::string&) {}, [](const nlohmann::ordered_json&) {});
  rec.on_rank_started(0, 42);
  rec.on_rank_output(0, Stream::Out, "hello\n", nullptr);
  auto s = sample("h\\1", {{0, 1}});
  GpuSample g;
  g.index = 3;
  g.power_watts = 250.5;
  g.ranks = {0};
  s.gpus.push_back(g);
  rec.on_sample(s);
  auto text = prometheus_text(rec.state(), Clock::now());
  CHECK(text.find("sgpu_rank_output_bytes_total{run=\"r\\\"1\",rank=\"0\",node=\"h\\\\1\"} 6\n") != std::string::npos);
  CHECK(text.find("sgpu_rank_running{run=\"r\\\"1\",rank=\"0\",node=\"h\\\\1\"} 1\n") != std::string::npos);
  CHECK(text.find("sgpu_gpu_power_watts{run=\"r\\\"1\",node=\"h\\\\1\",gpu=\"3\",rank=\"0\"} 250.5\n") !=
        std::string::npos);
  CHECK(text.find("sgpu_rank_cpu_percent{run=\"r\\\"1\",rank=\"0\",node=\"h\\\\1\"} 99.5\n") != std::string::npos);
  // Every sample line belongs to a family declared before it.
  std::istringstream in(text);
  std::string declared;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) declared = line.substr(7, line.find(' ', 7) - 7);
    if (line.empty() || line[0] == '#') continue;
    CAPTURE(line);
    CHECK(line.rfind(declared + "{", 0) == 0);
  }
}
