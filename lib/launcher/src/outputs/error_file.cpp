#include "sgpu/launcher/outputs/error_file.hpp"

#include "sgpu/launcher/io/json_depth.hpp"

#include <vector>

namespace sgpu::launcher {

namespace {
using json = nlohmann::ordered_json;

// Torch writes the timestamp as a string in the nested form, a number in the flat one.
std::optional<long long> as_timestamp(const json& v) {
  if (v.is_number_integer()) return v.get<long long>();
  if (v.is_number()) return static_cast<long long>(v.get<double>());
  if (v.is_string()) {
    try {
      std::size_t used = 0;
      auto s = v.get<std::string>();
      long long t = std::stoll(s, &used);
      if (used == s.size()) return t;
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

std::string as_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }
}  // namespace

std::optional<ErrorFileRecord> parse_error_file(std::string_view text) {
  if (json_nesting_depth(text) > kMaxRankJsonDepth) return std::nullopt;
  auto doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("message")) return std::nullopt;
  ErrorFileRecord rec;
  const auto& message = doc["message"];
  if (message.is_object()) {
    if (message.contains("message")) rec.message = as_text(message["message"]);
    if (auto extra = message.find("extraInfo"); extra != message.end() && extra->is_object()) {
      if (auto stack = extra->find("py_callstack"); stack != extra->end()) rec.traceback = as_text(*stack);
      if (auto ts = extra->find("timestamp"); ts != extra->end()) rec.timestamp = as_timestamp(*ts);
    }
    if (auto code = message.find("errorCode"); code != message.end() && code->is_number_integer())
      rec.error_code = code->get<int>();
  } else {
    rec.message = as_text(message);
    if (auto ts = doc.find("timestamp"); ts != doc.end()) rec.timestamp = as_timestamp(*ts);
  }
  rec.document = std::move(doc);
  return rec;
}

json error_file_for_parent(const std::optional<ErrorFileRecord>& rank_record, const std::string& message,
                           const std::string& details, long long timestamp, int error_code) {
  if (rank_record) {
    json doc = rank_record->document;
    // The rank cannot know its own exit code (a signal, say); torchrun sets it
    // the same way, and leaves the flat form as it is.
    if (doc["message"].is_object()) doc["message"]["errorCode"] = error_code;
    return doc;
  }
  return {{"message",
           {{"message", message},
            {"extraInfo", {{"py_callstack", details}, {"timestamp", std::to_string(timestamp)}}},
            {"errorCode", error_code}}}};
}

std::string tail_lines(std::string_view text, std::size_t n, bool cut_at_start) {
  if (cut_at_start) {
    // A tail read starts inside a line; a tail with no line break at all is one long line, kept.
    if (auto nl = text.find('\n'); nl != std::string_view::npos) text.remove_prefix(nl + 1);
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  if (text.empty() || n == 0) return {};
  std::size_t begin = text.size();  // where the earliest line kept so far starts
  for (std::size_t lines = 0; lines < n && begin > 0; ++lines) {
    std::size_t line_end = begin == text.size() ? begin : begin - 1;  // its '\n', or the end
    if (line_end == 0) {
      begin = 0;
      break;
    }
    auto nl = text.rfind('\n', line_end - 1);
    begin = nl == std::string_view::npos ? 0 : nl + 1;
  }
  return std::string(text.substr(begin)) + "\n";
}

}  // namespace sgpu::launcher
