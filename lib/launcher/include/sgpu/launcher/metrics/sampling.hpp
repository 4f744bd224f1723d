#pragma once
// The pure half of sampling a job (--sample-every): reading a process's line
// of /proc, a heartbeat's step, CPU use between two samples, and which ranks
// fall behind the others (stragglers).
#include <cstdint>
#include <optional>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

namespace sgpu::launcher::metrics {

// /proc/<pid>/stat's fields that a sample keeps.
struct ProcStat {
  char state = '?';
  std::uint64_t cpu_ticks = 0;  // utime + stime, in clock ticks
  int threads = 0;
  std::uint64_t rss_pages = 0;
};
// nullopt when the text is not a stat line (the process name, in parentheses,
// may hold spaces and parentheses itself: the fields start after the last ')').
std::optional<ProcStat> parse_proc_stat(std::string_view text);

// Whether a stat's figures are a running process's own. A zombie, or a process
// in its exit that has let its memory go (no resident pages), has none: a
// sample of it would report a rank at 0 MB in the instant before its exit is
// seen.
bool has_own_figures(const ProcStat& stat);

// The step a heartbeat file names: its last line that is a whole number
// ("1200", or "step 1200" written by hand is not one). `tail` is the file's
// end; a last line still being written (no newline, and not the whole file)
// is skipped for the one before. nullopt: none (a file only touched).
std::optional<std::int64_t> parse_heartbeat_step(std::string_view tail, bool whole_file);

// Percent of one core used between two samples `seconds` apart.
double cpu_percent(std::uint64_t ticks_before, std::uint64_t ticks_now, double seconds, long ticks_per_second);

double median(std::vector<double> values);

// A rank is a straggler when its step rate is below the median of the other
// ranks' rates divided by `factor`, in `samples` of its samples in a row.
// Each is reported once per attempt.
struct StragglerRule {
  double factor = 1.5;
  int samples = 2;
};

struct Straggler {
  int rank = 0;
  double rate = 0;    // its steps per second
  double median = 0;  // the others'
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerRule rule) : rule_(rule) {}
  // The newest rates of the ranks one sample covered (rank, steps/s): the
  // others' newest rates stay as they were. Returns the ranks that just
  // became stragglers.
  std::vector<Straggler> update(const std::vector<std::pair<int, double>>& rates);
  const std::set<int>& reported() const { return reported_; }
  void reset();  // a new attempt

 private:
  StragglerRule rule_;
  std::vector<std::optional<double>> rates_;  // by rank
  std::vector<int> slow_in_a_row_;            // by rank
  std::set<int> reported_;
};

}  // namespace sgpu::launcher::metrics
