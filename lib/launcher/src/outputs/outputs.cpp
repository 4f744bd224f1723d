#include "sgpu/launcher/outputs/outputs.hpp"

#include <unistd.h>
#include <climits>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/outputs/console.hpp"
#include "sgpu/launcher/outputs/console_sink.hpp"
#include "sgpu/launcher/outputs/error_file.hpp"
#include "sgpu/launcher/outputs/fanout.hpp"
#include "sgpu/launcher/outputs/report.hpp"
#include "sgpu/launcher/outputs/run_files.hpp"
#include "sgpu/launcher/outputs/run_log.hpp"
#include "sgpu/launcher/outputs/status_line.hpp"
#include "sgpu/launcher/outputs/summary.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

namespace {
constexpr std::size_t kResultLimit = 16 << 20;
constexpr std::size_t kErrorFileLimit = 4 << 20;
constexpr std::size_t kStderrTailBytes = 64 << 10;
constexpr std::size_t kStderrTailLines = 20;

std::string get(const env::Environment& e, const char* name) {
  auto it = e.find(name);
  return it == e.end() ? std::string() : it->second;
}

std::string this_host() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

void write_stdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}
}  // namespace

void check_output_options(const JobSpec& spec, int world_size) {
  if (spec.output_format != "text" && spec.output_format != "json")
    throw Error(fmt::format("-o {}: unknown output format (valid: text, json)", spec.output_format));
  for (int r : spec.console_ranks)
    if (r >= world_size)
      throw Error(fmt::format("--ranks: rank {} is not in the job, which has {} rank{} (0-{})", r, world_size,
                              world_size == 1 ? "" : "s", world_size - 1));
  if (spec.raw_output && spec.console_ranks.size() > 1)
    throw Error(
        fmt::format("--raw shows one rank's bytes untouched, but --ranks names {}; give one rank, e.g. --ranks {}",
                    spec.console_ranks.size(), spec.console_ranks.front()));
}

struct JobOutputs::Impl {
  LaunchPlan plan;
  env::Environment sgpu_env;
  std::string host = this_host();
  nlohmann::ordered_json spec;
  bool json_output;
  ConsoleSink sink;
  RunLog run_log;
  ConsolePrinter console;
  std::optional<StatusLine> status;
  FanOut fanout;
  std::optional<TrackingLink> tracking;

  static std::vector<std::string> rank_hosts(const LaunchPlan& p) {
    std::vector<std::string> hosts;
    for (const auto& r : p.ranks) hosts.push_back(r.host);
    return hosts;
  }

  static ConsoleSink make_sink(const JobSpec& spec, const env::Environment& e) {
    // With -o json stdout carries the summary alone: the job's lines go to stderr.
    int out_fd = spec.output_format == "json" ? 2 : 1;
    bool dumb = get(e, "TERM") == "dumb";
    bool status = !spec.raw_output && !dumb && ::isatty(2) == 1;
    return ConsoleSink(out_fd, 2, status ? 2 : -1);
  }

  static ConsoleOptions console_options(const JobSpec& spec, const LaunchPlan& plan, const env::Environment& e) {
    ConsoleOptions o;
    // Once ranks span nodes every line names its node: "host:3".
    for (const auto& r : plan.ranks)
      o.labels.push_back(r.host.empty() ? std::to_string(r.place.rank) : fmt::format("{}:{}", r.host, r.place.rank));
    o.ranks = spec.console_ranks;
    if (spec.raw_output) o.raw_rank = spec.console_ranks.empty() ? 0 : spec.console_ranks.front();
    o.timestamps = spec.timestamps;
    // https://no-color.org: any non-empty NO_COLOR turns colour off.
    bool color = get(e, "NO_COLOR").empty() && get(e, "TERM") != "dumb";
    int out_fd = spec.output_format == "json" ? 2 : 1;
    o.color = {color && ::isatty(out_fd) == 1, color && ::isatty(2) == 1};
    return o;
  }

  Impl(boost::asio::io_context& io, const JobSpec& job, const LaunchPlan& p, const env::Environment& e)
      : plan(p),
        sgpu_env(e),
        spec(spec_json(job, p)),
        json_output(job.output_format == "json"),
        sink(make_sink(job, e)),
        run_log(p.run_dir, static_cast<int>(p.ranks.size()), host, rank_hosts(p)),
        console(sink, console_options(job, p, e)) {
    write_file_atomic((fs::path(plan.run_dir) / "spec.json").string(), dump_json(spec));
    run_log.append_event({{"event", "run_started"},
                          {"run_id", plan.run_id},
                          {"host", host},
                          {"sgpu_pid", ::getpid()},
                          {"world_size", plan.ranks.size()},
                          {"nnodes", p.ranks.empty() ? 1 : p.ranks.front().place.nnodes},
                          {"spec", "spec.json"}});
    fanout.add(run_log);
    fanout.add(console);
    if (sink.has_status()) {
      status.emplace(io, sink, static_cast<int>(plan.ranks.size()), plan.timeout);
      fanout.add(*status);
    }
  }

  RunReport gather(const JobOutcome& outcome) {
    RunReport report;
    report.run_id = plan.run_id;
    report.run_dir = plan.run_dir;
    report.end = outcome.end;
    report.exit_code = outcome.exit_code;
    report.started = outcome.started;
    report.ended = outcome.ended;
    report.timeout = plan.timeout;
    report.mlflow = tracking;
    for (const auto& r : plan.ranks) {
      RankReport rank;
      rank.rank = r.place.rank;
      rank.host = r.host.empty() ? host : r.host;
      auto result = read_file(r.files.result_file, kResultLimit + 1);
      if (result && result->size() > kResultLimit) {
        report.warnings.push_back(fmt::format("{}: over {} MiB, left out of the summary (result null)",
                                              r.files.result_file, kResultLimit >> 20));
        result.reset();
      }
      rank.result = parse_result(result);
      report.ranks.push_back(std::move(rank));
    }
    for (const auto& rec : outcome.ranks) {
      auto& rank = report.ranks.at(static_cast<std::size_t>(rec.rank));
      rank.pid = rec.pid;
      rank.status = rec.status;
      rank.terminated_by_sgpu = rec.terminated_by_sgpu;
      rank.started = rec.started;
      rank.ended = rec.ended;
    }
    report.root_cause = root_cause(report, outcome);
    for (auto& w : run_log.write_errors()) report.warnings.push_back(std::move(w));
    return report;
  }

  std::optional<RootCause> root_cause(const RunReport& report, const JobOutcome& outcome) const {
    using Kind = env::JobEnd::Kind;
    RootCause cause;
    cause.kind = outcome.end.kind;
    cause.source = "sgpu";
    switch (outcome.end.kind) {
      case Kind::Completed:
        return std::nullopt;
      case Kind::TimedOut:
        cause.message =
            fmt::format("the job ran past --timeout {}", plan.timeout ? env::format_duration(*plan.timeout) : "?");
        return cause;
      case Kind::Interrupted:
        cause.message = fmt::format("sgpu received {}", env::signal_name(outcome.end.signal));
        return cause;
      case Kind::SpawnFailed:
        cause.rank = outcome.end.rank;
        cause.message = outcome.spawn_error;
        return cause;
      case Kind::NodeLost:
        cause.message = fmt::format("node {} was lost: {}", outcome.end.host, outcome.end.reason);
        return cause;
      case Kind::RankFailed:
        break;
    }
    cause.rank = outcome.end.rank;
    const auto& rank = report.ranks.at(static_cast<std::size_t>(cause.rank));
    cause.message = failure_message(rank.rank, rank.host, rank.pid, outcome.end.status);
    const auto& files = plan.ranks.at(static_cast<std::size_t>(cause.rank)).files;
    if (auto text = read_file(files.error_file, kErrorFileLimit)) cause.record = parse_error_file(*text);
    if (cause.record && !(cause.record->message.empty() && cause.record->traceback.empty())) {
      if (!cause.record->message.empty()) cause.message += ": " + cause.record->message;
      cause.details = cause.record->traceback.empty() ? cause.record->message : cause.record->traceback;
      cause.source = "error_file";
      cause.source_path = files.error_file;
      return cause;
    }
    cause.source = "stderr";
    cause.source_path = rank_log_path(plan.run_dir, cause.rank, Stream::Err);
    std::error_code ec;
    auto size = fs::file_size(cause.source_path, ec);
    if (auto tail = read_file(cause.source_path, kStderrTailBytes, true))
      cause.details = tail_lines(*tail, kStderrTailLines, !ec && size > kStderrTailBytes);
    return cause;
  }

  // A launcher above sgpu (torchrun, a scheduler) learns the root cause from
  // the file it named in our TORCHELASTIC_ERROR_FILE, as from any rank.
  void write_parent_error_file(const RunReport& report) const {
    auto path = get(sgpu_env, "TORCHELASTIC_ERROR_FILE");
    if (path.empty() || report.exit_code == 0 || !report.root_cause) return;
    const auto& c = *report.root_cause;
    auto ts = c.record && c.record->timestamp ? *c.record->timestamp : static_cast<long long>(std::time(nullptr));
    auto doc = error_file_for_parent(c.record, "sgpu: " + c.message, c.details, ts, report.exit_code);
    try {
      write_file_atomic(path, dump_json(doc, -1));
    } catch (const Error& e) {
      fmt::print(stderr, "sgpu: warning: TORCHELASTIC_ERROR_FILE: {}\n", e.what());
    }
  }
};

JobOutputs::JobOutputs(boost::asio::io_context& io, const JobSpec& spec, const LaunchPlan& plan,
                       const env::Environment& sgpu_env)
    : impl_(std::make_unique<Impl>(io, spec, plan, sgpu_env)) {}

JobOutputs::~JobOutputs() = default;

JobObserver& JobOutputs::observer() { return impl_->fanout; }

void JobOutputs::set_tracking(TrackingLink link) { impl_->tracking = std::move(link); }

int JobOutputs::finish(const JobOutcome& outcome) {
  auto& s = *impl_;
  s.sink.clear_status();
  auto report = s.gather(outcome);
  auto summary = summary_json(report, s.spec);
  try {
    write_file_atomic((fs::path(s.plan.run_dir) / "summary.json").string(), dump_json(summary));
  } catch (const Error& e) {
    report.warnings.emplace_back(e.what());
  }
  s.run_log.append_event({{"event", "run_finished"},
                          {"status", job_end_name(report.end.kind)},
                          {"exit_code", report.exit_code},
                          {"duration_s", duration_seconds(report.started, report.ended)},
                          {"summary", "summary.json"}});
  auto text = format_report(report);
  std::fwrite(text.data(), 1, text.size(), stderr);
  s.write_parent_error_file(report);
  if (s.json_output) write_stdout(dump_json(summary));
  return report.exit_code;
}

}  // namespace sgpu::launcher
