#include <string>

#include <doctest/doctest.h>

#include "sgpu/launcher/io/json_depth.hpp"
#include "sgpu/launcher/outputs/run_log.hpp"
#include "sgpu/launcher/outputs/summary.hpp"

using namespace sgpu::launcher;
using json = nlohmann::ordered_json;
using sgpu::env::ExitStatus;
using sgpu::env::JobEnd;

TEST_CASE("launcher::result_json") {
  struct Row {
    const char* what;
    std::optional<std::string> content;
    std::string json_text;
  };
  const Row rows[] = {
      {"missing", std::nullopt, "null"},
      {"a JSON object, compacted", R"({"loss": 0.5, "steps": [1, 2]})", R"({"loss":0.5,"steps":[1,2]})"},
      {"pretty JSON on one line", "{\n  \"a\": [\n    1,\n\t2\r\n  ]\n}\n", R"({"a":[1,2]})"},
      {"spaces inside strings stay", R"({"s" : "a  b\" c "})", R"({"s":"a  b\" c "})"},
      {"an escaped backslash ends before the quote", R"(["\\" , 1])", R"(["\\",1])"},
      {"numbers stay as written", "[1.50, 1e3]", "[1.50,1e3]"},
      {"a number with a newline", "42\n", "42"},
      {"JSON null written by the rank", "null", "null"},
      {"text", "done\n", R"("done")"},
      {"text without newline", "done", R"("done")"},
      {"text keeps inner newlines", "a\nb\n\n", R"("a\nb\n")"},
      {"broken JSON is text", "{\"a\": ", R"("{\"a\": ")"},
      {"empty file", "", R"("")"},
      {"UTF-8 text stays text", "caf\xC3\xA9 \xE2\x9C\x93", "\"caf\xC3\xA9 \xE2\x9C\x93\""},
      {"a pickle is not text", std::string("\x80\x05\x95\x0b\x00\x00", 6), "null"},
      {"a lone continuation byte", "ok\xBF", "null"},
      {"a sequence cut short", "ok\xE2\x9C", "null"},
      {"an overlong slash", "\xC0\xAF", "null"},
      {"a surrogate", "\xED\xA0\x80", "null"},
      {"above U+10FFFF", "\xF4\x90\x80\x80", "null"},
      {"65 levels are left out, not parsed", std::string(65, '[') + std::string(65, ']'), "null"},
      {"50000 levels are left out, not parsed", std::string(50000, '[') + std::string(50000, ']'), "null"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    CHECK(result_json(row.content) == row.json_text);
  }
  SUBCASE("64 levels are kept") {
    auto text = std::string(64, '[') + std::string(64, ']');
    CHECK(result_json(text) == text);
  }
  SUBCASE("a big array is as long as written, not ten times") {
    std::string zeros = "[0";
    for (int i = 0; i < 100000; ++i) zeros += ", 0";
    zeros += "]\n";
    CHECK(result_json(zeros).size() == 2 + 2 * 100001 - 1);
  }
}

TEST_CASE("launcher::json_nesting_depth") {
  struct Row {
    const char* what;
    std::string text;
    std::size_t depth;
  };
  const Row rows[] = {
      {"a scalar", "42", 0},
      {"an empty object", "{}", 1},
      {"mixed", R"({"a": [1, {"b": [[]]}]})", 5},
      {"brackets in strings do not count", R"({"a": "[[[[{{{"})", 1},
      {"an escaped quote stays in the string", R"(["\"[[[["])", 1},
      {"an escaped backslash ends before the quote", R"(["\\", [[]]])", 3},
      {"unbalanced closers do not go below zero", "]]]][", 1},
      {"counting stops past the limit", std::string(50000, '['), kMaxRankJsonDepth + 1},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    CHECK(json_nesting_depth(row.text) == row.depth);
  }
}

TEST_CASE("launcher::spec_json masks secrets as a dry run does") {
  JobSpec spec;
  spec.env = {{"WANDB_API_KEY", "abc123"}, {"DB_URL", "postgres://me:pw@db/x"}, {"EPOCHS", "3"}};
  LaunchPlan plan;
  auto doc = spec_json(spec, plan);
  CHECK(doc["env"]["WANDB_API_KEY"] == "****");
  CHECK(doc["env"]["DB_URL"] == "postgres://me:****@db/x");
  CHECK(doc["env"]["EPOCHS"] == "3");
  CHECK(doc.dump().find("abc123") == std::string::npos);
}

TEST_CASE("launcher::dump_json survives bytes that are not UTF-8") {
  json doc = {{"result", std::string("ok\xff\xfe")}};
  auto text = dump_json(doc, -1);
  CHECK(json::parse(text)["result"] == "ok\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("launcher::summary_json") {
  RunReport rep;
  rep.run_id = "r1";
  rep.run_dir = "/runs/r1";
  rep.end.kind = JobEnd::Kind::RankFailed;
  rep.end.rank = 1;
  rep.end.status = ExitStatus::killed(11);
  rep.exit_code = 139;
  rep.started = Clock::time_point(std::chrono::seconds(1700000000));
  rep.ended = rep.started + std::chrono::milliseconds(2500);
  RankReport r0;
  r0.rank = 0;
  r0.host = "n1";
  r0.pid = 10;
  r0.status = ExitStatus::killed(15);
  r0.terminated_by_sgpu = true;
  r0.started = rep.started;
  r0.ended = rep.ended;
  r0.result_file = "/runs/r1/ranks/0/result";
  RankReport r1 = r0;
  r1.rank = 1;
  r1.pid = 11;
  r1.status = ExitStatus::killed(11);
  r1.terminated_by_sgpu = false;
  // r1 wrote a pickle: no JSON for it, but the row says where it is
  r1.result_file = "/runs/r1/ranks/1/result";
  RankReport r2;
  r2.rank = 2;
  r2.host = "n1";
  rep.ranks = {r0, r1, r2};
  rep.results = {R"({"acc":0.9})", "null", "null"};
  RootCause cause;
  cause.kind = JobEnd::Kind::RankFailed;
  cause.rank = 1;
  cause.message = "rank 1 (pid 11 on n1) was killed by SIGSEGV (signal 11)";
  cause.source = "stderr";
  cause.source_path = "/runs/r1/ranks/1/stderr";
  cause.details = "Fatal Python error: Segmentation fault\n";
  rep.root_cause = cause;

  auto text = summary_text(summary_json(rep, json{{"world_size", 3}}), rep.results);
  auto doc = json::parse(text);
  CHECK(text.find("\n  \"results\": [\n    {\"acc\":0.9},\n    null,\n    null\n  ],\n") != std::string::npos);
  CHECK(doc["version"] == 2);
  CHECK(doc["run_id"] == "r1");
  CHECK(doc["status"] == "rank_failed");
  CHECK(doc["exit_code"] == 139);
  CHECK(doc["timed_out"] == false);
  CHECK(doc["started_at"] == "2023-11-14T22:13:20.000Z");
  CHECK(doc["ended_at"] == "2023-11-14T22:13:22.500Z");
  CHECK(doc["duration_s"] == 2.5);
  CHECK(doc["spec"]["world_size"] == 3);
  CHECK(doc["results"] == json::array({json{{"acc", 0.9}}, nullptr, nullptr}));
  REQUIRE(doc["ranks"].size() == 3);
  CHECK_FALSE(doc["ranks"][0].contains("result"));  // each result once
  CHECK(doc["ranks"][0]["signal"] == "SIGTERM");
  CHECK(doc["ranks"][0]["exit_code"] == nullptr);
  CHECK(doc["ranks"][0]["verdict"] == "terminated_by_sgpu");
  CHECK(doc["ranks"][0]["stdout"] == "/runs/r1/ranks/0/stdout");
  CHECK(doc["ranks"][0]["result_file"] == "/runs/r1/ranks/0/result");
  CHECK(doc["ranks"][1]["result_file"] == "/runs/r1/ranks/1/result");
  CHECK(doc["ranks"][2]["result_file"] == nullptr);
  CHECK(doc["ranks"][1]["verdict"] == "failed");
  CHECK(doc["ranks"][2]["verdict"] == "not_started");
  CHECK(doc["ranks"][2]["pid"] == nullptr);
  CHECK(doc["ranks"][2]["duration_s"] == nullptr);
  const auto& rc = doc["root_cause"];
  CHECK(rc["reason"] == "rank_failed");
  CHECK(rc["rank"] == 1);
  CHECK(rc["pid"] == 11);
  CHECK(rc["signal"] == "SIGSEGV");
  CHECK(rc["exit_code"] == nullptr);
  CHECK(rc["source"] == "stderr");
  CHECK(rc["details"] == "Fatal Python error: Segmentation fault\n");
  CHECK(rc["error_file"] == nullptr);

  SUBCASE("a timeout has a root cause without a rank") {
    rep.end.kind = JobEnd::Kind::TimedOut;
    rep.exit_code = 124;
    rep.root_cause = RootCause{JobEnd::Kind::TimedOut, -1, "the job ran past --timeout 1s", "", "sgpu", "", {}};
    auto t = summary_json(rep, json::object());
    CHECK(t["timed_out"] == true);
    CHECK(t["status"] == "timed_out");
    CHECK(t["root_cause"]["rank"] == nullptr);
    CHECK(t["root_cause"]["message"] == "the job ran past --timeout 1s");
  }
  SUBCASE("success: no root cause") {
    rep.end = JobEnd{};
    rep.exit_code = 0;
    rep.root_cause.reset();
    CHECK(summary_json(rep, json::object())["root_cause"] == nullptr);
  }
}

TEST_CASE("launcher::summary_text") {
  RunReport rep;
  rep.run_id = "r1";
  SUBCASE("no ranks: an empty list") {
    CHECK(json::parse(summary_text(summary_json(rep, json::object()), {}))["results"] == json::array());
  }
  SUBCASE("a string elsewhere that reads like the key is left alone") {
    json spec = {{"env", {{"X", "\n  \"results\": null"}}}, {"results", nullptr}};
    auto doc = json::parse(summary_text(summary_json(rep, spec), {"7"}));
    CHECK(doc["results"] == json::array({7}));
    CHECK(doc["spec"] == spec);
  }
}

TEST_CASE("launcher::not_started_json has every key a started run's summary has") {
  RunReport rep;
  rep.run_id = "r1";
  auto started = summary_json(rep, json::object());
  JobEnd end;
  end.kind = JobEnd::Kind::NotStarted;
  end.reason = "cannot reach nodeb";
  end.cause_code = 255;
  for (const auto& link : {std::optional<TrackingLink>{}, std::optional<TrackingLink>{{"abc", "http://m/#/r/abc"}}}) {
    auto doc = not_started_json("r1", "/runs/r1", end, link);
    for (const auto& item : started.items()) CHECK_MESSAGE(doc.contains(item.key()), item.key());
    CHECK(doc["exit_code"] == 255);
    CHECK(doc["root_cause"]["message"] == "cannot reach nodeb");
    if (link) {
      CHECK(doc["mlflow"] == json{{"run_id", "abc"}, {"url", "http://m/#/r/abc"}});
    } else {
      CHECK(doc["mlflow"] == nullptr);
    }
  }
}

TEST_CASE("launcher::run_log events") {
  auto e = rank_exited_event(3, "n1", 77, ExitStatus::killed(9), true, 1.25);
  CHECK(e == json{{"event", "rank_exited"},
                  {"rank", 3},
                  {"host", "n1"},
                  {"attempt", 0},
                  {"pid", 77},
                  {"exit_code", nullptr},
                  {"signal", "SIGKILL"},
                  {"terminated_by_sgpu", true},
                  {"duration_s", 1.25}});
  JobEnd end;
  end.kind = JobEnd::Kind::Interrupted;
  end.signal = 2;
  CHECK(teardown_event(end) ==
        json{{"event", "teardown"}, {"attempt", 0}, {"reason", "interrupted"}, {"signal", "SIGINT"}});
  end.kind = JobEnd::Kind::RankFailed;
  end.rank = 4;
  CHECK(teardown_event(end, 2) == json{{"event", "teardown"}, {"attempt", 2}, {"reason", "rank_failed"}, {"rank", 4}});
  SUBCASE("a restart: the attempt to come, how the last ended, the wait") {
    end.status = ExitStatus::exited(3);
    CHECK(restart_event(1, end, sgpu::env::Seconds{0.5}) == json{{"event", "restart"},
                                                                 {"attempt", 1},
                                                                 {"after", "rank_failed"},
                                                                 {"exit_code", 3},
                                                                 {"rank", 4},
                                                                 {"backoff_s", 0.5}});
  }
  SUBCASE("a rank's events carry their attempt") {
    CHECK(rank_exited_event(0, "n1", 5, ExitStatus::exited(0), false, 1, 3)["attempt"] == 3);
  }
}
