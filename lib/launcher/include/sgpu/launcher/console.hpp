#pragma once
// The console view of a job: each rank's lines, whole, with a "[rank] " prefix,
// stdout to stdout and stderr to stderr. Lines of different ranks never mix.
#include <array>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "sgpu/launcher/events.hpp"

namespace sgpu::launcher {

// Splits a byte stream into lines. Pure: feed bytes, get whole lines
// (including their '\n'); finish() returns a last line that had none.
class LineSplitter {
 public:
  template <typename OnLine>
  void feed(std::string_view bytes, OnLine&& on_line) {
    std::size_t start = 0;
    while (start < bytes.size()) {
      auto nl = bytes.find('\n', start);
      if (nl == std::string_view::npos) {
        partial_.append(bytes.substr(start));
        return;
      }
      if (partial_.empty()) {
        on_line(bytes.substr(start, nl - start + 1));
      } else {
        partial_.append(bytes.substr(start, nl - start + 1));
        on_line(std::string_view(partial_));
        partial_.clear();
      }
      start = nl + 1;
    }
  }
  // The unterminated tail, if any; the splitter is empty afterwards.
  std::string finish() { return std::exchange(partial_, {}); }
  bool has_partial() const { return !partial_.empty(); }

 private:
  std::string partial_;
};

struct ConsoleOptions {
  bool prefix = true;
  int stdout_fd = 1;
  int stderr_fd = 2;
};

class ConsolePrinter : public JobObserver {
 public:
  explicit ConsolePrinter(ConsoleOptions options) : options_(options) {}

  void on_rank_output(int rank, Stream stream, std::string_view bytes) override;
  void on_rank_output_closed(int rank, Stream stream) override;

 private:
  void emit_line(int rank, Stream stream, std::string_view line, std::string& out) const;
  void write_all(Stream stream, std::string_view data);

  ConsoleOptions options_;
  std::map<std::pair<int, Stream>, LineSplitter> splitters_;
  std::array<bool, 2> broken_{false, false};  // EPIPE: the reader went away
};

}  // namespace sgpu::launcher
