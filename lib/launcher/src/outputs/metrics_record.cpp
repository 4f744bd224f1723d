#include "sgpu/launcher/outputs/metrics_record.hpp"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "sgpu/launcher/outputs/rank_hosts.hpp"
#include "sgpu/launcher/runs/run_state.hpp"

namespace sgpu::launcher {
namespace {

using json = nlohmann::ordered_json;

template <class T>
json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

double round3(double v) { return std::round(v * 1000) / 1000; }

json rounded(const std::optional<double>& v) { return v ? json(round3(*v)) : json(nullptr); }

// A label value in Prometheus' text format: backslash, quote and newline escaped.
std::string label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

class Exposition {
 public:
  explicit Exposition(std::string run) : run_(std::move(run)) {}
  void family(const Family& f) {
    text_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
    current_ = f.name;
  }
  void value(const std::string& labels, double v) {
    text_ += fmt::format("{}{{run=\"{}\"{}}} {}\n", current_, label(run_), labels, number(v));
  }
  std::string take() { return std::move(text_); }

 private:
  static std::string number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    return fmt::format("{}", v);
  }
  std::string run_;
  std::string current_;
  std::string text_;
};

}  // namespace

std::vector<nlohmann::ordered_json> sample_lines(const NodeSample& sample, const std::vector<bool>& stragglers) {
  std::vector<json> lines;
  auto ts = iso_time(sample.time);
  for (const auto& r : sample.ranks) {
    lines.push_back({{"ts", ts},
                     {"node", sample.node},
                     {"host", sample.host},
                     {"rank", r.rank},
                     {"pid", r.pid},
                     {"cpu_percent", rounded(r.cpu_percent)},
                     {"rss_bytes", r.rss_bytes},
                     {"threads", r.threads},
                     {"state", std::string(1, r.state)},
                     {"step", or_null(r.step)},
                     {"step_rate", rounded(r.step_rate)},
                     {"progress_age_s", rounded(r.progress_age_s)},
                     {"straggler", r.rank >= 0 && static_cast<std::size_t>(r.rank) < stragglers.size() &&
                                       stragglers[static_cast<std::size_t>(r.rank)]}});
  }
  for (const auto& g : sample.gpus) {
    lines.push_back({{"ts", ts},
                     {"node", sample.node},
                     {"host", sample.host},
                     {"gpu", g.index},
                     {"uuid", g.uuid},
                     {"ranks", g.ranks},
                     {"utilization_percent", or_null(g.utilization_percent)},
                     {"memory_utilization_percent", or_null(g.memory_utilization_percent)},
                     {"memory_used_bytes", or_null(g.memory_used_bytes)},
                     {"memory_total_bytes", or_null(g.memory_total_bytes)},
                     {"ranks_memory_bytes", or_null(g.ranks_memory_bytes)},
                     {"power_watts", rounded(g.power_watts)},
                     {"power_limit_watts", rounded(g.power_limit_watts)},
                     {"temperature_c", or_null(g.temperature_c)},
                     {"sm_clock_mhz", or_null(g.sm_clock_mhz)},
                     {"throttle_reasons", or_null(g.throttle_reasons)}});
  }
  return lines;
}

std::string prometheus_text(const MetricsState& s, Clock::time_point now) {
  Exposition out(s.run_id);
  auto rank_labels = [&](int rank) {
    auto r = static_cast<std::size_t>(rank);
    auto host = r < s.rank_hosts.size() ? s.rank_hosts[r] : std::string();
    return fmt::format(",rank=\"{}\",node=\"{}\"", rank, label(host.empty() ? s.here : host));
  };
  out.family({"sgpu_run_info", "gauge", "the run: 1, with its state as a label"});
  out.value(fmt::format(",state=\"{}\"", label(s.state)), 1);
  out.family({"sgpu_run_attempt", "gauge", "the attempt running now (0: the first; each restart adds one)"});
  out.value("", s.attempt);
  out.family({"sgpu_world_size", "gauge", "ranks in the job"});
  out.value("", s.world_size);
  if (s.last_progress != Clock::time_point{}) {
    out.family({"sgpu_seconds_since_progress", "gauge", "seconds since any rank's newest output or heartbeat"});
    out.value("", std::chrono::duration<double>(now - s.last_progress).count());
  }
  out.family({"sgpu_rank_running", "gauge", "1 while the rank's process runs"});
  for (std::size_t r = 0; r < s.running.size(); ++r) out.value(rank_labels(static_cast<int>(r)), s.running[r] ? 1 : 0);
  out.family({"sgpu_rank_output_bytes_total", "counter", "bytes the rank wrote to stdout and stderr"});
  for (std::size_t r = 0; r < s.output_bytes.size(); ++r)
    out.value(rank_labels(static_cast<int>(r)), static_cast<double>(s.output_bytes[r]));
  out.family({"sgpu_rank_straggler", "gauge", "1 once the rank was found slower than the others (this attempt)"});
  for (std::size_t r = 0; r < s.stragglers.size(); ++r)
    out.value(rank_labels(static_cast<int>(r)), s.stragglers[r] ? 1 : 0);
  struct RankFamily {
    Family f;
    std::function<std::optional<double>(const RankSample&)> get;
  };
  const std::vector<RankFamily> rank_families = {
      {{"sgpu_rank_cpu_percent", "gauge", "the rank's CPU use, percent of one core"},
       [](const RankSample& r) { return r.cpu_percent; }},
      {{"sgpu_rank_rss_bytes", "gauge", "the rank's resident memory"},
       [](const RankSample& r) { return std::optional<double>(static_cast<double>(r.rss_bytes)); }},
      {{"sgpu_rank_threads", "gauge", "the rank's threads"},
       [](const RankSample& r) { return std::optional<double>(r.threads); }},
      {{"sgpu_rank_step", "gauge", "the newest step the rank's heartbeat named"},
       [](const RankSample& r) { return r.step ? std::optional<double>(static_cast<double>(*r.step)) : std::nullopt; }},
      {{"sgpu_rank_step_rate", "gauge", "the rank's steps per second between its last two samples"},
       [](const RankSample& r) { return r.step_rate; }},
      {{"sgpu_rank_heartbeat_age_seconds", "gauge", "seconds since the rank's heartbeat file was touched"},
       [](const RankSample& r) { return r.progress_age_s; }},
  };
  for (const auto& fam : rank_families) {
    out.family(fam.f);
    for (const auto& [rank, sample] : s.ranks)
      if (auto v = fam.get(sample)) out.value(rank_labels(rank), *v);
  }
  struct GpuFamily {
    Family f;
    std::function<std::optional<double>(const GpuSample&)> get;
  };
  auto num = [](const auto& o) { return o ? std::optional<double>(static_cast<double>(*o)) : std::nullopt; };
  const std::vector<GpuFamily> gpu_families = {
      {{"sgpu_gpu_utilization_percent", "gauge", "percent of the time a kernel ran (NVML)"},
       [&](const GpuSample& g) { return num(g.utilization_percent); }},
      {{"sgpu_gpu_memory_utilization_percent", "gauge", "percent of the time memory was read or written (NVML)"},
       [&](const GpuSample& g) { return num(g.memory_utilization_percent); }},
      {{"sgpu_gpu_memory_used_bytes", "gauge", "GPU memory in use, by any process"},
       [&](const GpuSample& g) { return num(g.memory_used_bytes); }},
      {{"sgpu_gpu_memory_total_bytes", "gauge", "GPU memory"},
       [&](const GpuSample& g) { return num(g.memory_total_bytes); }},
      {{"sgpu_gpu_ranks_memory_bytes", "gauge", "GPU memory the job's ranks hold"},
       [&](const GpuSample& g) { return num(g.ranks_memory_bytes); }},
      {{"sgpu_gpu_power_watts", "gauge", "power draw"}, [](const GpuSample& g) { return g.power_watts; }},
      {{"sgpu_gpu_temperature_celsius", "gauge", "GPU temperature"},
       [&](const GpuSample& g) { return num(g.temperature_c); }},
      {{"sgpu_gpu_sm_clock_mhz", "gauge", "SM clock"}, [&](const GpuSample& g) { return num(g.sm_clock_mhz); }},
      {{"sgpu_gpu_throttle_reasons", "gauge", "NVML's clock event reasons, a bit mask (0: none)"},
       [&](const GpuSample& g) { return num(g.throttle_reasons); }},
  };
  for (const auto& fam : gpu_families) {
    out.family(fam.f);
    for (const auto& [key, g] : s.gpus) {
      auto v = fam.get(g);
      if (!v) continue;
      std::string ranks;
      for (int r : g.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
      out.value(fmt::format(",node=\"{}\",gpu=\"{}\",rank=\"{}\"", label(key.first), key.second, ranks), *v);
    }
  }
  return out.take();
}

MetricsRecorder::MetricsRecorder(const std::string& run_dir, std::string run_id, std::string here,
                                 std::vector<std::string> rank_hosts, double straggler_factor,
                                 std::function<void(const std::string&)> warn,
                                 std::function<void(const nlohmann::ordered_json&)> event)
    : file_(AppendFile::deferred((std::filesystem::path(run_dir) / kRunMetricsFile).string())),
      factor_(straggler_factor),
      warn_(std::move(warn)),
      event_(std::move(event)) {
  state_.run_id = std::move(run_id);
  state_.here = std::move(here);
  state_.world_size = static_cast<int>(rank_hosts.size());
  state_.output_bytes.assign(rank_hosts.size(), 0);
  state_.running.assign(rank_hosts.size(), false);
  state_.stragglers.assign(rank_hosts.size(), false);
  state_.rank_hosts = std::move(rank_hosts);
  if (factor_ > 1) stragglers_.emplace(metrics::StragglerRule{factor_, 2});
}

void MetricsRecorder::on_nodes_placed(const std::vector<NodePlacement>& nodes) {
  apply_placement(state_.rank_hosts, nodes);
}

void MetricsRecorder::on_rank_started(int rank, int /*pid*/) {
  auto r = static_cast<std::size_t>(rank);
  if (r < state_.running.size()) state_.running[r] = true;
}

void MetricsRecorder::on_rank_output(int rank, Stream /*stream*/, std::string_view bytes, const BytesOwner& /*owner*/) {
  auto r = static_cast<std::size_t>(rank);
  if (r < state_.output_bytes.size()) state_.output_bytes[r] += bytes.size();
  state_.last_progress = Clock::now();
}

void MetricsRecorder::on_rank_exited(int rank, const env::ExitStatus& /*status*/, bool /*terminated_by_sgpu*/) {
  auto r = static_cast<std::size_t>(rank);
  if (r < state_.running.size()) state_.running[r] = false;
}

void MetricsRecorder::on_attempt_started(int attempt) {
  state_.attempt = attempt;
  state_.stragglers.assign(state_.stragglers.size(), false);
  if (stragglers_) stragglers_->reset();
}

void MetricsRecorder::on_sample(const NodeSample& sample) {
  std::vector<std::pair<int, double>> rates;
  for (const auto& r : sample.ranks) {
    state_.ranks[r.rank] = r;
    if (r.step_rate) rates.emplace_back(r.rank, *r.step_rate);
    if (r.progress_age_s) {
      auto touched =
          sample.time - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(*r.progress_age_s));
      if (touched > state_.last_progress) state_.last_progress = touched;
    }
  }
  for (const auto& g : sample.gpus) state_.gpus[{sample.host, g.index}] = g;
  if (stragglers_ && !rates.empty()) note_stragglers(stragglers_->update(rates));
  // After the verdict: a rank's line says whether it is a straggler (this
  // attempt), so its newest line is all `sgpu status` and `sgpu top` read.
  std::string text;
  for (const auto& line : sample_lines(sample, state_.stragglers))
    text += line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  file_.append(text);  // one write: a reader never sees half a sample's lines of one rank
}

void MetricsRecorder::note_stragglers(const std::vector<metrics::Straggler>& found) {
  for (const auto& s : found) {
    auto r = static_cast<std::size_t>(s.rank);
    if (r < state_.stragglers.size()) state_.stragglers[r] = true;
    auto host = r < state_.rank_hosts.size() ? state_.rank_hosts[r] : std::string();
    warn_(
        fmt::format("rank {}{} is a straggler: {:.2f} steps/s against the other ranks' median {:.2f} (more than "
                    "{}x slower, two samples in a row)",
                    s.rank, host.empty() ? "" : fmt::format(" ({})", host), s.rate, s.median, factor_));
    event_({{"event", "straggler"},
            {"rank", s.rank},
            {"host", host},
            {"attempt", state_.attempt},
            {"step_rate", round3(s.rate)},
            {"median_step_rate", round3(s.median)},
            {"factor", factor_}});
  }
}

}  // namespace sgpu::launcher
