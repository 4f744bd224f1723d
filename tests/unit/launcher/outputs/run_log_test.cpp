#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <boost/asio/io_context.hpp>
#include <nlohmann/json.hpp>

#include "sgpu/launcher/outputs/run_log.hpp"

namespace fs = std::filesystem;
using nlohmann::ordered_json;
using sgpu::launcher::RunLog;

namespace {
std::vector<std::string> lines_of(const fs::path& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}
}  // namespace

TEST_CASE("launcher::RunLog::append_event: one line each, ts first, then the event's keys in order") {
  auto dir = fs::temp_directory_path() / ("sgpu-run-log-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    boost::asio::io_context io;
    RunLog log(io, dir.string(), 1, "node1");
    log.append_event({{"event", "run_started"}, {"run_id", "r1"}, {"name", nullptr}, {"nested", {{"b", 1}, {"a", 2}}}});
    log.append_event({{"event", "odd"}, {"text", "quote \" and\nnewline"}});
    log.append_event({{"ts", "given"}, {"event", "its own ts"}});
    log.append_event(ordered_json::object());
  }
  auto lines = lines_of(dir / "events.jsonl");
  REQUIRE(lines.size() == 4);
  std::vector<ordered_json> docs;
  for (const auto& line : lines) docs.push_back(ordered_json::parse(line));
  for (const auto& doc : docs) {
    REQUIRE(doc.is_object());
    CHECK(doc.begin().key() == "ts");
  }
  CHECK(docs[0]["ts"].get<std::string>().size() == 24);  // 2026-12-07T06:21:13.529Z
  std::vector<std::string> keys;
  for (auto it = docs[0].begin(); it != docs[0].end(); ++it) keys.push_back(it.key());
  CHECK(keys == std::vector<std::string>{"ts", "event", "run_id", "name", "nested"});
  CHECK(docs[0]["nested"].dump() == R"({"b":1,"a":2})");
  CHECK(docs[1]["text"] == "quote \" and\nnewline");
  CHECK(docs[2]["ts"] == "given");
  CHECK(docs[2].size() == 2);
  CHECK(docs[3].size() == 1);
  fs::remove_all(dir);
}
