#include <string>

#include <doctest/doctest.h>

#include "sgpu/launcher/outputs/error_file.hpp"

using namespace sgpu::launcher;

TEST_CASE("launcher::parse_error_file") {
  struct Row {
    const char* what;
    const char* text;
    bool ok;
    const char* message;
    const char* traceback;
    std::optional<long long> timestamp;
    std::optional<int> error_code;
  };
  const Row rows[] = {
      {"torch @record (nested)",
       R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"t.py\", line 3\nRuntimeError: boom\n", "timestamp": "1700000000"}}})",
       true, "RuntimeError: boom", "Traceback (most recent call last):\n  File \"t.py\", line 3\nRuntimeError: boom\n",
       1700000000, std::nullopt},
      {"nested with a launcher's errorCode",
       R"({"message": {"message": "X", "extraInfo": {"py_callstack": "tb", "timestamp": "5"}, "errorCode": -11}})",
       true, "X", "tb", 5, -11},
      {"flat form", R"({"message": "Signal 11 (SIGSEGV) received", "timestamp": 1700000001})", true,
       "Signal 11 (SIGSEGV) received", "", 1700000001, std::nullopt},
      {"flat form, timestamp as text", R"({"message": "m", "timestamp": "42"})", true, "m", "", 42, std::nullopt},
      {"nested without extraInfo", R"({"message": {"message": "only"}})", true, "only", "", std::nullopt, std::nullopt},
      {"message of another type", R"({"message": 7})", true, "7", "", std::nullopt, std::nullopt},
      {"bad timestamp ignored", R"({"message": "m", "timestamp": "soon"})", true, "m", "", std::nullopt, std::nullopt},
      {"no message", R"({"error": "x"})", false, "", "", std::nullopt, std::nullopt},
      {"not JSON", "Traceback (most recent", false, "", "", std::nullopt, std::nullopt},
      {"empty", "", false, "", "", std::nullopt, std::nullopt},
      {"an array", "[1]", false, "", "", std::nullopt, std::nullopt},
      {"nested 50000 levels deep: not parsed", nullptr, false, "", "", std::nullopt, std::nullopt},
  };
  const std::string deep = R"({"message": )" + std::string(50000, '[') + std::string(50000, ']') + "}";
  for (const auto& row : rows) {
    CAPTURE(row.what);
    auto rec = parse_error_file(row.text != nullptr ? std::string_view(row.text) : std::string_view(deep));
    REQUIRE(rec.has_value() == row.ok);
    if (!rec) continue;
    CHECK(rec->message == row.message);
    CHECK(rec->traceback == row.traceback);
    CHECK(rec->timestamp == row.timestamp);
    CHECK(rec->error_code == row.error_code);
  }
}

TEST_CASE("launcher::error_file_for_parent") {
  SUBCASE("a rank's nested file goes up with the exit code set, as torchrun does") {
    auto rec =
        parse_error_file(R"({"message": {"message": "X", "extraInfo": {"py_callstack": "tb", "timestamp": "5"}}})");
    auto doc = error_file_for_parent(rec, "ignored", "ignored", 9, 139);
    CHECK(doc["message"]["errorCode"] == 139);
    CHECK(doc["message"]["message"] == "X");
    CHECK(doc["message"]["extraInfo"]["py_callstack"] == "tb");
    // What torch's ProcessFailure reads back.
    auto back = parse_error_file(doc.dump());
    CHECK(back->error_code == 139);
    CHECK(back->timestamp == 5);
  }
  SUBCASE("a flat file goes up unchanged") {
    auto rec = parse_error_file(R"({"message": "m", "timestamp": 3})");
    CHECK(error_file_for_parent(rec, "x", "y", 9, 1) == rec->document);
  }
  SUBCASE("without a rank file: the nested form from sgpu's message") {
    auto doc = error_file_for_parent(std::nullopt, "sgpu: rank 2 exited with code 7", "last\nlines\n", 1700000000, 7);
    auto back = parse_error_file(doc.dump());
    REQUIRE(back.has_value());
    CHECK(back->message == "sgpu: rank 2 exited with code 7");
    CHECK(back->traceback == "last\nlines\n");
    CHECK(back->timestamp == 1700000000);
    CHECK(back->error_code == 7);
    CHECK(doc["message"]["extraInfo"]["timestamp"].is_string());  // as torch writes it
  }
}

TEST_CASE("launcher::tail_lines") {
  struct Row {
    const char* what;
    std::string text;
    std::size_t n;
    bool cut;
    std::string tail;
  };
  const Row rows[] = {
      {"fewer lines than asked", "a\nb\n", 5, false, "a\nb\n"},
      {"the last n", "a\nb\nc\nd\n", 2, false, "c\nd\n"},
      {"no final newline", "a\nb\nc", 2, false, "b\nc\n"},
      {"trailing blank lines dropped", "a\nb\n\n\n", 1, false, "b\n"},
      {"crlf", "a\r\nb\r\n", 1, false, "b\n"},
      {"empty", "", 3, false, ""},
      {"zero lines", "a\n", 0, false, ""},
      {"a first empty line kept", "\nx", 2, false, "\nx\n"},
      {"cut: the partial first line goes", "rtial\nfull\n", 5, true, "full\n"},
      {"cut, one long line: kept", "xxxxxxxx", 5, true, "xxxxxxxx\n"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.what);
    CHECK(tail_lines(row.text, row.n, row.cut) == row.tail);
  }
}
