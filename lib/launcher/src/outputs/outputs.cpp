#include "sgpu/launcher/outputs/outputs.hpp"

#include <unistd.h>
#include <algorithm>
#include <climits>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/post.hpp>

#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/env/secrets.hpp"
#include "sgpu/launcher/io/json_depth.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/outputs/console.hpp"
#include "sgpu/launcher/outputs/console_sink.hpp"
#include "sgpu/launcher/outputs/error_file.hpp"
#include "sgpu/launcher/outputs/fanout.hpp"
#include "sgpu/launcher/outputs/metrics_record.hpp"
#include "sgpu/launcher/outputs/metrics_server.hpp"
#include "sgpu/launcher/outputs/report.hpp"
#include "sgpu/launcher/outputs/run_dir_watch.hpp"
#include "sgpu/launcher/outputs/run_log.hpp"
#include "sgpu/launcher/outputs/run_state_file.hpp"
#include "sgpu/launcher/outputs/status_line.hpp"
#include "sgpu/launcher/outputs/summary.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/runs/registry.hpp"
#include "sgpu/launcher/runs/retire.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

namespace {
constexpr std::size_t kResultLimit = 16 << 20;    // one rank's result in the summary, at most
constexpr std::size_t kResultsBudget = 32 << 20;  // every rank's together, in rank order
constexpr std::size_t kErrorFileLimit = 4 << 20;
constexpr std::size_t kStderrTailBytes = 64 << 10;
constexpr std::size_t kStderrTailLines = 20;
// Retention's share of one launch: runs renamed into the trash at most, and
// how many retired runs wait there before a detached process deletes them.
constexpr std::size_t kRetiredPerLaunch = 8;
constexpr std::size_t kTrashBatch = 8;

// The reachability check's cost: its slowest node's connect.
double slowest_connect_ms(const std::vector<LaunchPlan::NodeRoute>& routes) {
  double slowest = 0;
  for (const auto& r : routes) slowest = std::max(slowest, r.connect_ms);
  return slowest;
}

std::string get(const env::Environment& e, const char* name) {
  auto it = e.find(name);
  return it == e.end() ? std::string() : it->second;
}

std::string this_host() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
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
  // Posts retire_older_runs() once the first rank has started: retention
  // then runs on the event loop while the ranks run, not between their end
  // and sgpu's. This run is the newest and counts among the kept either
  // way, so the runs left are the same.
  struct RetireOnceStarted : JobObserver {
    Impl& s;
    bool posted = false;
    explicit RetireOnceStarted(Impl& impl) : s(impl) {}
    void on_rank_started(int /*rank*/, int /*pid*/) override {
      if (posted || s.job_spec.keep_runs <= 0) return;
      posted = true;
      boost::asio::post(s.io, [&impl = s, alive = std::weak_ptr<bool>(s.alive)] {
        if (!alive.expired()) impl.retire_older_runs(true);
      });
    }
  };

  boost::asio::io_context& io;
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);  // a posted retirement runs only while this lives
  bool retention_done = false;
  // The deleter is due (retire_older_runs): forked at the run's very end,
  // where few pages are left to copy on write, not under the running job.
  bool trash_due = false;
  RetireOnceStarted retire_once_started{*this};
  JobSpec job_spec;  // spec.json's source, for set_tracking's variables
  LaunchPlan plan;
  env::Environment sgpu_env;
  std::string host = this_host();
  nlohmann::ordered_json spec;
  bool json_output;
  ConsoleSink sink;
  RunLog run_log;
  RunStateFile state_file;
  ConsolePrinter console;
  std::optional<StatusLine> status;
  FanOut fanout;
  std::optional<TrackingLink> tracking;
  std::optional<RunDirDeletedWatch> dir_watch;
  SignalBeforeRecord signal_before;
  // --sample-every's samples (metrics.jsonl, stragglers) and --metrics-port.
  std::optional<MetricsRecorder> metrics;
  std::optional<MetricsServer> metrics_server;

  static std::vector<std::string> rank_hosts(const LaunchPlan& p) {
    std::vector<std::string> hosts;
    for (const auto& r : p.ranks) hosts.push_back(r.host);
    return hosts;
  }

  static ConsoleSink make_sink(boost::asio::io_context& io, const JobSpec& spec, const env::Environment& e) {
    // With -o json stdout carries the summary alone: the job's lines go to stderr.
    int out_fd = spec.output_format == "json" ? 2 : 1;
    bool dumb = get(e, "TERM") == "dumb";
    bool status = !spec.raw_output && !dumb && ::isatty(2) == 1;
    return ConsoleSink(io, out_fd, 2, status ? 2 : -1);
  }

  static ConsoleOptions console_options(const JobSpec& spec, const LaunchPlan& plan, const env::Environment& e) {
    ConsoleOptions o;
    // Once ranks span nodes every line names its node: "host:3".
    for (const auto& r : plan.ranks)
      o.labels.push_back(r.host.empty() ? std::to_string(r.place.rank) : fmt::format("{}:{}", r.host, r.place.rank));
    o.ranks = spec.console_ranks;
    if (spec.raw_output) o.raw_rank = spec.console_ranks.empty() ? 0 : spec.console_ranks.front();
    o.timestamps = spec.timestamps;
    o.max_restarts = spec.max_restarts;
    // https://no-color.org: any non-empty NO_COLOR turns colour off.
    bool color = get(e, "NO_COLOR").empty() && get(e, "TERM") != "dumb";
    int out_fd = spec.output_format == "json" ? 2 : 1;
    o.color = {color && ::isatty(out_fd) == 1, color && ::isatty(2) == 1};
    return o;
  }

  Impl(boost::asio::io_context& io_, const JobSpec& job, const LaunchPlan& p, const env::Environment& e)
      : io(io_),
        job_spec(job),
        plan(p),
        sgpu_env(e),
        spec(spec_json(job, p)),
        json_output(job.output_format == "json"),
        sink(make_sink(io, job, e)),
        run_log(io, p.run_dir, static_cast<int>(p.ranks.size()), host, rank_hosts(p)),
        state_file(p.run_dir, state_record(job, p, host)),
        console(sink, console_options(job, p, e)) {
    write_run_file((fs::path(plan.run_dir) / "spec.json").string(), dump_json(spec));
    run_log.append_event(
        {{"event", "run_started"},
         {"run_id", plan.run_id},
         {"name", job.name.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(job.name)},
         {"host", host},
         {"sgpu_pid", ::getpid()},
         {"world_size", plan.ranks.size()},
         {"nnodes", p.ranks.empty() ? 1 : p.ranks.front().place.nnodes},
         {"spec", "spec.json"}});
    if (!plan.routes.empty())  // several nodes: how each reached MASTER_ADDR, before any rank started
      run_log.append_event({{"event", "network_checked"},
                            {"master_addr", spec["master_addr"]},
                            {"master_port", spec["master_port"]},
                            {"routes", spec["routes"]},
                            {"slowest_ms", slowest_connect_ms(plan.routes)}});
    if (plan.env_sync) {  // --sync-env: each node's copy of the environment, before its agent started
      auto event = nlohmann::ordered_json{{"event", "env_synced"}};
      event.update(env_sync_json(*plan.env_sync));
      run_log.append_event(event);
    }
    dir_watch.emplace(io, plan.run_dir, [this] { run_dir_deleted(); });
    fanout.add(*dir_watch);
    for (const auto& r : plan.ranks) {
      if (!r.binding) continue;
      auto event = nlohmann::ordered_json{
          {"event", "rank_binding"},
          {"rank", r.place.rank},
          {"gpu", r.gpus.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.gpus.front())}};
      event.update(binding_json(*r.binding, plan.cpu_bind != CpuBind::None));
      run_log.append_event(event);
    }
    fanout.add(run_log);
    fanout.add(retire_once_started);
    fanout.add(console);
    fanout.add(signal_before);
    if (job.sample_every.limit() || job.metrics_port) {
      metrics.emplace(
          plan.run_dir, plan.run_id, host, rank_hosts(p), job.straggler_factor,
          [this](const std::string& warning) { sink.write(Stream::Err, fmt::format("sgpu: warning: {}\n", warning)); },
          [this](const nlohmann::ordered_json& event) { run_log.append_event(event); });
      fanout.add(*metrics);
    }
    if (job.metrics_port)
      metrics_server.emplace(io, job.metrics_addr, *job.metrics_port,
                             [this] { return prometheus_text(metrics->state(), Clock::now()); });
    if (sink.has_status()) {
      status.emplace(io, sink, static_cast<int>(plan.ranks.size()), plan.timeout);
      if (!plan.routes.empty()) status->set_network_check(slowest_connect_ms(plan.routes));
      fanout.add(*status);
    }
  }

  // What `sgpu runs` lists, without reading the bigger spec.json and summary.json.
  static nlohmann::ordered_json state_record(const JobSpec& job, const LaunchPlan& p, const std::string& host) {
    std::string entrypoint = job.entrypoint.kind == env::Entrypoint::Kind::Module ? "-m " : "";
    entrypoint += job.entrypoint.target;
    for (const auto& a : env::mask_arguments(job.entrypoint.args)) entrypoint += " " + env::shell_quote(a);
    return {{"version", 1},
            {"run_id", p.run_id},
            {"state", "running"},
            {"host", host},
            {"sgpu_pid", ::getpid()},
            {"detached", job.detach},
            {"started_at", iso_time(Clock::now())},
            {"world_size", p.ranks.size()},
            {"nnodes", p.ranks.empty() ? 1 : p.ranks.front().place.nnodes},
            {"entrypoint", entrypoint},
            // What find_run (a RUN that is a name) and --idempotency-key look for.
            {"name", job.name.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(job.name)},
            {"idempotency_key", job.idempotency_key.empty() ? nlohmann::ordered_json(nullptr)
                                                            : nlohmann::ordered_json(job.idempotency_key)}};
  }

  // Someone deleted the run directory while the run is live: the job goes
  // on, the console says so once, and the directory is made again (mode
  // 0700, with the lock and state.json) so that `sgpu status`, `wait` and
  // `cancel` still find the run and its end is kept.
  void run_dir_deleted() {
    auto warning = fmt::format(
        "the run directory {} was deleted while the run was live: what the ranks wrote to their logs until then is "
        "gone (the console showed it); it was made again for the rest of the run",
        plan.run_dir);
    sink.write(Stream::Err, fmt::format("sgpu: warning: {}\n", warning));
    try {
      auto dir = fs::path(plan.run_dir);
      int first = plan.ranks.empty() ? 0 : plan.ranks.front().place.rank;
      create_run_dir(dir.parent_path().string(), dir.filename().string(), static_cast<int>(plan.ranks.size()), first);
      state_file.rewrite();
      run_log.reopen();
      write_run_file((dir / "spec.json").string(), dump_json(spec));
    } catch (const Error& e) {
      sink.write(Stream::Err, fmt::format("sgpu: warning: {}\n", e.what()));
    }
  }

  // Retention (output.keep_runs, SGPU_KEEP_RUNS), once a run: once its
  // ranks started (RetireOnceStarted), else once it reported. The finished
  // runs beyond the newest N (this one counts, running ones stay) are
  // renamed into the trash, a few per launch; a detached process deletes the
  // trash in batches, and retires the rest when there were more (thousands
  // of old runs cost no launch more than a few renames).
  std::string runs_root() const { return fs::path(plan.run_dir).parent_path().string(); }

  // `mid_run`: its warnings go through the console, between the job's lines.
  void retire_older_runs(bool mid_run) {
    int keep = job_spec.keep_runs;
    if (retention_done || keep <= 0) return;
    retention_done = true;
    auto warn = [&](const std::string& what) {
      auto line = fmt::format("sgpu: warning: cannot retire an old run: {}\n", what);
      if (mid_run)
        sink.write(Stream::Err, line);
      else
        diagnostic("{}", line);
    };
    try {
      auto root = runs_root();
      auto retired = retire_runs(root, keep, kRetiredPerLaunch);
      for (const auto& e : retired.errors) warn(e);
      trash_due = retired.more || (retired.retired > 0 && trash_size(root) >= kTrashBatch);
    } catch (const std::exception& e) {  // on the event loop: the job goes on
      warn(e.what());
    }
  }

  RunReport gather(const JobOutcome& outcome) {
    RunReport report;
    report.run_id = plan.run_id;
    report.run_dir = plan.run_dir;
    report.end = outcome.end;
    report.exit_code = outcome.exit_code();
    report.started = outcome.started;
    report.ended = outcome.ended;
    report.timeout = plan.timeout;
    report.mlflow = tracking;
    report.signal_before = signal_before.record();
    report.excluded = outcome.excluded;
    std::size_t budget = kResultsBudget;
    for (const auto& r : plan.ranks) {
      RankReport rank;
      rank.rank = r.place.rank;
      rank.host = r.host.empty() ? host : r.host;
      if (r.binding) rank.binding = binding_json(*r.binding, plan.cpu_bind != CpuBind::None);
      report.results.push_back(read_result(r.files.result_file, rank, budget, report.warnings));
      report.ranks.push_back(std::move(rank));
    }
    fill_ranks(report.ranks, outcome.ranks);
    for (auto& w : run_log.write_errors()) report.warnings.push_back(std::move(w));
    report.root_cause = root_cause(report.ranks, outcome.end, outcome.spawn_error, -1, report.warnings);
    // Earlier attempts' files are in ranks/<r>/attempt-<k>/; the last one's where they always are.
    for (std::size_t i = 0; i < outcome.attempts.size(); ++i) {
      const auto& a = outcome.attempts[i];
      bool last = i + 1 == outcome.attempts.size();
      AttemptReport attempt;
      attempt.attempt = a.attempt;
      attempt.end = a.end;
      attempt.exit_code = a.exit_code();
      attempt.started = a.started;
      attempt.ended = a.ended;
      attempt.ranks = report.ranks;
      for (auto& r : attempt.ranks) {
        RankReport blank;
        blank.rank = r.rank;
        blank.host = r.host;
        r = std::move(blank);
      }
      fill_ranks(attempt.ranks, a.ranks);
      attempt.root_cause = root_cause(attempt.ranks, a.end, a.spawn_error, last ? -1 : a.attempt, report.warnings);
      attempt.nodes = a.nodes;
      report.attempts.push_back(std::move(attempt));
    }
    // The last attempt's root cause reads the same files as the run's: its
    // warnings (an error file not read) are said once.
    std::set<std::string> seen;
    std::vector<std::string> once;
    for (auto& w : report.warnings)
      if (seen.insert(w).second) once.push_back(std::move(w));
    report.warnings = std::move(once);
    return report;
  }

  // A rank's result for the summary (result_json), read bounded; `budget`
  // is what the ranks after it may still take.
  static std::string read_result(const std::string& path, RankReport& rank, std::size_t& budget,
                                 std::vector<std::string>& warnings) {
    std::string problem;
    auto result = read_file(path, kResultLimit + 1, false, &problem);
    if (result && result->size() > kResultLimit)
      problem = fmt::format("over {} MiB", kResultLimit >> 20);
    else if (result && json_nesting_depth(*result) > kMaxRankJsonDepth)
      problem = fmt::format("JSON nested deeper than {} levels", kMaxRankJsonDepth);
    if (result) rank.result_file = path;
    if (!problem.empty()) {
      warnings.push_back(fmt::format("{}: {}, left out of the summary (result null)", path, problem));
      return "null";
    }
    auto text = result_json(std::move(result));
    if (text.size() > budget) {
      warnings.push_back(
          fmt::format("{}: left out of the summary (result null): its {:.1f} MiB would take the results past their "
                      "budget of {} MiB over all ranks; the file keeps it",
                      path, static_cast<double>(text.size()) / (1 << 20), kResultsBudget >> 20));
      return "null";
    }
    budget -= text.size();
    return text;
  }

  static void fill_ranks(std::vector<RankReport>& ranks, const std::vector<RankRecord>& records) {
    for (const auto& rec : records) {
      auto& rank = ranks.at(static_cast<std::size_t>(rec.rank));
      rank.pid = rec.pid;
      rank.status = rec.status;
      rank.terminated_by_sgpu = rec.terminated_by_sgpu;
      rank.started = rec.started;
      rank.ended = rec.ended;
      if (!rec.host.empty()) rank.host = rec.host;
    }
  }

  // Why the run (or one attempt of it) ended; `attempt` >= 0 reads that
  // attempt's kept files (ranks/<r>/attempt-<k>/), -1 the newest ones.
  std::optional<RootCause> root_cause(const std::vector<RankReport>& ranks, const env::JobEnd& end,
                                      const std::string& spawn_error, int attempt,
                                      std::vector<std::string>& warnings) const {
    using Kind = env::JobEnd::Kind;
    RootCause cause;
    cause.kind = end.kind;
    cause.source = "sgpu";
    switch (end.kind) {
      case Kind::Completed:
        return std::nullopt;
      case Kind::TimedOut:
        cause.message =
            fmt::format("the job ran past --timeout {}{}", plan.timeout ? env::format_duration(*plan.timeout) : "?",
                        end.reason.empty() ? "" : "; " + end.reason);  // the stacks' verdict
        return cause;
      case Kind::Interrupted:
        cause.message = fmt::format("sgpu received {}", env::signal_name(end.signal));
        return cause;
      case Kind::SpawnFailed:
        cause.rank = end.rank;
        cause.message = spawn_error;
        return cause;
      case Kind::Hung:  // the stacks' verdict
      case Kind::NodeLost:
      case Kind::StoppedByScheduler:
      case Kind::NotStarted:
      case Kind::Preempted:
        cause.message = env::describe_end(end);
        return cause;
      case Kind::RankFailed:
        break;
    }
    cause.rank = end.rank;
    const auto& rank = ranks.at(static_cast<std::size_t>(cause.rank));
    cause.message = failure_message(rank.rank, rank.host, rank.pid, end.status);
    auto error_file = plan.ranks.at(static_cast<std::size_t>(cause.rank)).files.error_file;
    auto stderr_path = rank_log_path(plan.run_dir, cause.rank, Stream::Err);
    if (attempt >= 0) {
      auto dir = fs::path(attempt_dir(plan.run_dir, cause.rank, attempt));
      error_file = (dir / "error.json").string();
      stderr_path = (dir / "stderr").string();
    }
    std::string problem;
    if (auto text = read_file(error_file, kErrorFileLimit, false, &problem)) {
      if (json_nesting_depth(*text) > kMaxRankJsonDepth)
        problem = fmt::format("JSON nested deeper than {} levels", kMaxRankJsonDepth);
      else
        cause.record = parse_error_file(*text);
    }
    if (!problem.empty()) warnings.push_back(fmt::format("{}: {}, not read (error file)", error_file, problem));
    if (cause.record && !(cause.record->message.empty() && cause.record->traceback.empty())) {
      if (!cause.record->message.empty()) cause.message += ": " + cause.record->message;
      cause.details = cause.record->traceback.empty() ? cause.record->message : cause.record->traceback;
      cause.source = "error_file";
      cause.source_path = error_file;
      return cause;
    }
    cause.source = "stderr";
    cause.source_path = stderr_path;
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
      write_named_file(path, dump_json(doc, -1));
    } catch (const Error& e) {
      diagnostic("sgpu: warning: TORCHELASTIC_ERROR_FILE: {}\n", e.what());
    }
  }
};

JobOutputs::JobOutputs(boost::asio::io_context& io, const JobSpec& spec, const LaunchPlan& plan,
                       const env::Environment& sgpu_env)
    : impl_(std::make_unique<Impl>(io, spec, plan, sgpu_env)) {}

JobOutputs::~JobOutputs() = default;

JobObserver& JobOutputs::observer() { return impl_->fanout; }

void JobOutputs::add_observer(JobObserver& other) { impl_->fanout.add(other); }

void JobOutputs::job_over() {
  if (impl_->metrics_server) impl_->metrics_server->close();
}

void JobOutputs::set_tracking(TrackingLink link, const env::Environment& env) {
  auto& s = *impl_;
  s.tracking = std::move(link);
  for (const auto& [name, value] : env) s.job_spec.env[name] = value;
  auto spec = spec_json(s.job_spec, s.plan);
  if (spec == s.spec) return;
  s.spec = std::move(spec);
  write_run_file((fs::path(s.plan.run_dir) / "spec.json").string(), dump_json(s.spec));
}

void JobOutputs::not_started(int exit_code) {
  auto& s = *impl_;
  job_over();
  s.sink.clear_status();
  auto state = exit_code == kExitTimeout ? RunState::TimedOut
               : exit_code == 128 + SIGINT || exit_code == 128 + SIGTERM || exit_code == 128 + SIGHUP
                   ? RunState::Cancelled
                   : RunState::Failed;
  auto now = Clock::now();
  try {
    s.state_file.finish(state, exit_code, now, now, 0);
  } catch (const Error& e) {
    diagnostic("sgpu: warning: {}\n", e.what());
  }
  s.run_log.append_event(
      {{"event", "run_finished"}, {"status", "not_started"}, {"exit_code", exit_code}, {"duration_s", 0}});
}

int JobOutputs::finish(const JobOutcome& outcome) {
  auto& s = *impl_;
  job_over();
  if (s.dir_watch) s.dir_watch->check_still_there();  // a short run has no watch: deleted under it?
  s.sink.clear_status();
  // A job that completed waits for the reader to take every line, as a plain
  // pipe would; one that was stopped (timeout, signal, failure) does not wait:
  // the run logs keep what the console could not show.
  auto unshown = s.sink.finish(outcome.end.kind == env::JobEnd::Kind::Completed);
  auto report = s.gather(outcome);
  s.run_log.keep_last_attempt();
  if (unshown > 0)
    report.warnings.push_back(fmt::format(
        "{} bytes of the job's output were not shown: the reader of sgpu's output was not reading; the logs in "
        "{}/ranks have every line",
        unshown, s.plan.run_dir));
  auto summary = summary_text(summary_json(report, std::move(s.spec)), report.results);  // its last use
  report.results = {};
  try {
    write_run_file((fs::path(s.plan.run_dir) / "summary.json").string(), summary);
  } catch (const Error& e) {
    report.warnings.emplace_back(e.what());
  }
  try {
    s.state_file.finish(final_state(report.end.kind), report.exit_code, report.started, report.ended,
                        duration_seconds(report.started, report.ended));
  } catch (const Error& e) {
    report.warnings.emplace_back(e.what());
  }
  s.run_log.append_event({{"event", "run_finished"},
                          {"status", env::job_end_name(report.end.kind)},
                          {"exit_code", report.exit_code},
                          {"duration_s", duration_seconds(report.started, report.ended)},
                          {"summary", "summary.json"}});
  auto text = format_report(report);
  diagnostic(text);
  s.write_parent_error_file(report);
  if (s.json_output) output(summary);
  s.retire_older_runs(false);
  if (s.trash_due) empty_trash_detached(s.runs_root(), s.job_spec.keep_runs);
  return report.exit_code;
}

}  // namespace sgpu::launcher
