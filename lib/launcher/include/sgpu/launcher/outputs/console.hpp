#pragma once
// The console view of a job: each rank's lines, whole, with a "[rank] " prefix,
// stdout to stdout and stderr to stderr. Lines of different ranks never mix:
// only whole segments reach the sink, one write per chunk read.
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sgpu/launcher/outputs/console_sink.hpp"
#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

// Splits a byte stream into console segments. A segment ends with "\n",
// "\r\n" or a lone "\r" (a progress bar redrawing itself), so every redraw
// gets its own prefix and is shown as it happens. A segment longer than
// `max_segment` is cut there (it reaches the console in pieces; the log files
// keep it whole). Pure: feed bytes, get segments including their terminator.
class LineSplitter {
 public:
  static constexpr std::size_t kMaxSegment = 1 << 20;
  explicit LineSplitter(std::size_t max_segment = kMaxSegment) : max_(max_segment) {}

  template <typename OnSegment>
  void feed(std::string_view bytes, OnSegment&& on_segment);
  // The unterminated tail, if any; the splitter is empty afterwards.
  std::string finish() { return std::exchange(partial_, {}); }
  bool has_partial() const { return !partial_.empty(); }

 private:
  template <typename OnSegment>
  void append_partial(std::string_view piece, OnSegment& on_segment);

  std::size_t max_;
  std::string partial_;
};

// The console's form of one segment (pure): `lead` ("[3] ", and the time with
// --timestamps), the segment, and "\n" where the segment has no terminator
// (a piece of an over-long line, a last line without one) or ends in a "\r"
// redraw with nothing to follow (`at_end`).
void append_console_segment(std::string& out, std::string_view lead, std::string_view segment, bool at_end);

// "[3] ", coloured when `color` (the colour follows the rank, so each rank's
// lines stand apart on a terminal).
std::string rank_prefix(std::string_view label, int rank, bool color);

struct ConsoleOptions {
  std::vector<std::string> labels;  // per rank: "0" now, "host:0" once ranks span nodes
  std::vector<int> ranks;           // ranks shown; empty: all
  std::optional<int> raw_rank;      // only this rank, its bytes untouched
  bool timestamps = false;
  int max_restarts = 0;                     // for "restart 1 of 3"
  std::array<bool, 2> color{false, false};  // per Stream: that fd is a terminal and colour is allowed
};

// "sgpu: attempt 0 ended: rank 1 failed first: exit 3 (exit code 3); restart 1 of 2 in 1s\n" (pure).
std::string restart_line(int attempt, int max_restarts, const env::JobEnd& cause, env::Seconds backoff);

class ConsolePrinter : public JobObserver {
 public:
  ConsolePrinter(ConsoleSink& sink, ConsoleOptions options);

  void on_rank_output(int rank, Stream stream, std::string_view bytes, const BytesOwner& owner) override;
  void on_rank_output_closed(int rank, Stream stream) override;
  // One line on stderr per restart: which attempt, why, and the wait.
  void on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) override;
  void on_excluded(const Exclusion& e) override;
  void on_nodes_placed(const std::vector<NodePlacement>& nodes) override;  // a spare's name on the ranks it took
  // Backpressure only while the job runs: once it ends (teardown, or every
  // rank exited) nothing may wait on the reader.
  void on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) override;
  void on_teardown(const env::JobEnd& cause) override;
  void on_signal_before(const env::SignalBefore& signal, Clock::time_point deadline, bool sent) override;
  std::vector<std::shared_ptr<OutputFlow>> output_flows() override { return sink_.flows(); }

 private:
  bool shown(int rank) const;
  // The prefix, with the time when --timestamps: what goes before each segment now.
  std::string_view lead(int rank, Stream stream);
  const std::string& prefix(int rank, Stream stream);

  ConsoleSink& sink_;
  ConsoleOptions options_;
  std::vector<bool> shown_;
  // Shared with the sink's file thread, which splits a regular file's lines
  // (ConsoleSink::render); only one of the two ever touches a stream's.
  std::map<std::pair<int, Stream>, std::shared_ptr<LineSplitter>> splitters_;
  std::map<std::pair<int, Stream>, std::string> prefixes_;
  std::string out_;   // reused for every chunk: no allocation per read
  std::string lead_;  // prefix and time, with --timestamps
  std::size_t exited_ = 0;
};

// ---- implementation of the templates ----

template <typename OnSegment>
void LineSplitter::append_partial(std::string_view piece, OnSegment& on_segment) {
  while (partial_.size() + piece.size() > max_) {
    auto take = max_ - partial_.size();
    partial_.append(piece.substr(0, take));
    on_segment(std::string_view(partial_));
    partial_.clear();
    piece.remove_prefix(take);
  }
  partial_.append(piece);
}

template <typename OnSegment>
void LineSplitter::feed(std::string_view bytes, OnSegment&& on_segment) {
  std::size_t pos = 0;
  // A "\r" held from the last chunk: a "\n" now makes it "\r\n", else it was a redraw.
  if (!partial_.empty() && partial_.back() == '\r' && !bytes.empty()) {
    if (bytes.front() == '\n') {
      partial_.push_back('\n');
      pos = 1;
    }
    on_segment(std::string_view(partial_));
    partial_.clear();
  }
  // '\n' is frequent and '\r' rare: one memchr pass each, the '\r' found kept.
  std::string_view::size_type next_cr = bytes.find('\r', pos);
  while (pos < bytes.size()) {
    if (next_cr != std::string_view::npos && next_cr < pos) next_cr = bytes.find('\r', pos);
    auto nl = bytes.find('\n', pos);
    auto term = std::min(nl, next_cr);
    if (term == std::string_view::npos) {
      append_partial(bytes.substr(pos), on_segment);
      return;
    }
    std::size_t end = term + 1;
    if (term == next_cr) {
      if (end == bytes.size()) {  // "\r" last: wait to see whether "\n" follows
        append_partial(bytes.substr(pos), on_segment);
        return;
      }
      if (bytes[end] == '\n') ++end;
    }
    auto segment = bytes.substr(pos, end - pos);
    if (partial_.empty() && segment.size() <= max_) {
      on_segment(segment);
    } else {
      append_partial(segment, on_segment);
      on_segment(std::string_view(partial_));
      partial_.clear();
    }
    pos = end;
  }
}

}  // namespace sgpu::launcher
