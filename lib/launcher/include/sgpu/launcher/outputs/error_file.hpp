#pragma once
// TORCHELASTIC_ERROR_FILE, as PyTorch's @record writes it and as launchers
// above sgpu read it. Pure: parsing and building the JSON, no I/O.
//   nested: {"message": {"message": "RuntimeError: boom",
//                        "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "1700000000"},
//                        "errorCode": 1}}        (errorCode: added by a launcher)
//   flat:   {"message": "RuntimeError: boom", "timestamp": 1700000000}
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sgpu::launcher {

struct ErrorFileRecord {
  std::string message;    // "RuntimeError: boom"
  std::string traceback;  // the Python call stack; empty in the flat form
  std::optional<long long> timestamp;
  std::optional<int> error_code;
  nlohmann::ordered_json document;  // as read, for passing it up unchanged
};

// nullopt when `text` is not JSON, has no "message", or nests deeper than
// kMaxRankJsonDepth.
std::optional<ErrorFileRecord> parse_error_file(std::string_view text);

// The error file sgpu writes for a launcher above it: the rank's own document
// with errorCode set (as torchrun does), or when there is none, the nested
// form built from `message` and `details` (e.g. the tail of the rank's stderr).
nlohmann::ordered_json error_file_for_parent(const std::optional<ErrorFileRecord>& rank_record,
                                             const std::string& message, const std::string& details,
                                             long long timestamp, int error_code);

// The last `n` lines of `text` (a cut first line dropped when `text` is the
// tail of something longer), as one string ending with "\n".
std::string tail_lines(std::string_view text, std::size_t n, bool cut_at_start = false);

}  // namespace sgpu::launcher
