// Run management: `sgpu runs`, `status`, `logs`, `wait`, `cancel`, `stacks`, `prune`.
// Each reads the run directories (lib/launcher runs/), so a run started in
// another terminal, attached or --detach, is seen alike.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/env/rank_list.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/outputs/console.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/runs/control_socket.hpp"
#include "sgpu/launcher/runs/follow.hpp"
#include "sgpu/launcher/runs/registry.hpp"
#include "sgpu/launcher/runs/retire.hpp"
#include "startup.hpp"

namespace sgpu::app {
namespace {
using launcher::RunInfo;
using launcher::RunState;
using ordered_json = nlohmann::ordered_json;

constexpr std::size_t kDefaultListed = 20;
constexpr std::size_t kEntrypointWidth = 48;
// `sgpu wait --timeout` ran out with the run still going (EX_TEMPFAIL): not
// 124, which is the run's own timeout.
constexpr int kExitWaitTimedOut = 75;

// What every run subcommand shares: where the runs are and how to answer.
struct Common {
  std::string log_dir;
  std::string format = "text";
  std::string root() const { return launcher::runs_root(log_dir, env::current_environment()); }
  bool json() const { return format == "json"; }
};

void add_common(CLI::App* cmd, Common& c) {
  cmd->add_option("-o,--output", c.format, "text (default) or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--log-dir", c.log_dir, "the runs directory (default $SGPU_HOME/runs, as for launch --log-dir)")
      ->check(non_empty_path());
}

void print_json(const ordered_json& doc) {
  launcher::output(doc.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n");
}

std::string short_duration(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  return env::format_duration(env::Seconds(std::round(s)));
}

std::string short_duration(const nlohmann::ordered_json& seconds) {
  return seconds.is_number() ? short_duration(seconds.get<double>()) : "-";
}

// A run whose state.json cannot be believed: listed and shown, never acted on.
void refuse_unreadable(const RunInfo& run, std::string_view verb) {
  if (run.state == RunState::Unknown)
    throw Error(
        fmt::format("cannot {} run {}: {} (give another run's id; 'sgpu runs' lists them)", verb, run.id, run.problem),
        1);
}

// Each run that is listed with a problem gets a line on stderr below the table.
void print_problems(const std::vector<RunInfo>& runs) {
  for (const auto& run : runs)
    if (!run.problem.empty()) launcher::diagnostic("sgpu: warning: run {}: {}\n", run.id, run.problem);
}

std::string start_time(const ordered_json& run) {
  // 2026-12-02T11:53:01.042Z -> 2026-12-02 11:53:01
  auto text = run["started_at"].is_string() ? run["started_at"].get<std::string>() : std::string("-");
  return text.size() >= 19 ? text.substr(0, 10) + " " + text.substr(11, 8) : text;
}

std::string exit_text(const ordered_json& run) {
  return run["exit_code"].is_number() ? std::to_string(run["exit_code"].get<int>()) : "-";
}

std::string name_text(const ordered_json& run) {
  return run["name"].is_string() ? run["name"].get<std::string>() : "-";
}

std::string runs_table(const std::vector<RunInfo>& runs) {
  std::size_t name_width = 4;  // "NAME"; names are at most 64 characters
  for (const auto& run : runs) name_width = std::max(name_width, name_text(launcher::run_json(run)).size());
  std::string out = fmt::format("{:<22}  {:<9}  {:<19}  {:>9}  {:>5}  {:>4}  {:<{}}  {}\n", "RUN", "STATE",
                                "STARTED (UTC)", "DURATION", "RANKS", "EXIT", "NAME", name_width, "ENTRYPOINT");
  for (const auto& run : runs) {
    auto j = launcher::run_json(run);
    auto entry = j["entrypoint"].is_string() ? j["entrypoint"].get<std::string>() : std::string();
    if (entry.size() > kEntrypointWidth) entry = entry.substr(0, kEntrypointWidth - 3) + "...";
    out += fmt::format("{:<22}  {:<9}  {:<19}  {:>9}  {:>5}  {:>4}  {:<{}}  {}\n", run.id,
                       j["state"].get<std::string>(), start_time(j), short_duration(j["duration_s"]), run.world_size,
                       exit_text(j), name_text(j), name_width, entry);
  }
  return out;
}

Command add_runs(CLI::App& app) {
  struct Flags : Common {
    bool all = false;
    bool ids = false;
    std::size_t limit = kDefaultListed;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("runs", "List runs, newest first: id, state, start, duration, ranks, exit code");
  add_common(cmd, *f);
  cmd->add_flag("--all", f->all, "every run (default: the newest 20)");
  cmd->add_option("--limit", f->limit, "the newest N runs")->check(at_least(1));
  cmd->add_flag("--ids", f->ids,
                "only the ids of every run, newest first, one per line, reading no run (for scripts and shell "
                "completion)");
  return [f](const DashTail&) {
    if (f->ids) {
      std::string out;
      for (const auto& id : launcher::run_ids(f->root())) out += id + "\n";
      launcher::output(out);
      return 0;
    }
    auto runs = launcher::list_runs(f->root(), f->all ? std::nullopt : std::optional(f->limit));
    if (f->json()) {
      ordered_json list = ordered_json::array();
      for (const auto& run : runs) list.push_back(launcher::run_json(run));
      print_json(list);
    } else if (runs.empty()) {
      launcher::output(fmt::format("no runs in {}\n", f->root()));
    } else {
      launcher::output(runs_table(runs));
      print_problems(runs);
    }
    return 0;
  };
}

// Each rank's newest sample (null: none) and whether it was named a straggler.
void with_samples(ordered_json& ranks, const ordered_json& samples) {
  for (auto& r : ranks) {
    auto key = std::to_string(r["rank"].get<int>());
    r["sample"] = samples["ranks"].contains(key) ? samples["ranks"][key] : ordered_json(nullptr);
    bool straggler = false;
    for (const auto& s : samples["stragglers"]) straggler = straggler || s == r["rank"];
    r["straggler"] = straggler;
  }
}

// "12.5", "-" for a null or missing field of a sample.
std::string sample_field(const ordered_json& sample, const char* key, const char* format) {
  if (!sample.is_object() || !sample.contains(key) || !sample[key].is_number()) return "-";
  return fmt::format(fmt::runtime(format), sample[key].get<double>());
}

std::string status_text(const RunInfo& run, const ordered_json& ranks) {
  auto j = launcher::run_json(run);
  std::string out = fmt::format("run {}: {}", run.id, j["state"].get<std::string>());
  if (j["exit_code"].is_number()) out += fmt::format(" (exit code {})", j["exit_code"].get<int>());
  if (run.state == RunState::Unknown) return out + fmt::format("\n  {}\n  run dir: {}\n", run.problem, run.dir);
  out += fmt::format(", {} rank{}, {} {}\n", run.world_size, run.world_size == 1 ? "" : "s",
                     run.state == RunState::Running ? "running for" : "took",
                     j["duration_s"].is_number() ? short_duration(j["duration_s"]) : "an unknown time");
  if (!run.problem.empty()) out += fmt::format("  note:       {}\n", run.problem);
  out += fmt::format("  entrypoint: {}\n", j["entrypoint"].is_string() ? j["entrypoint"].get<std::string>() : "?");
  if (j["name"].is_string()) out += fmt::format("  name:       {}\n", j["name"].get<std::string>());
  if (j["idempotency_key"].is_string())
    out += fmt::format("  key:        {}\n", j["idempotency_key"].get<std::string>());
  out += fmt::format("  started:    {} UTC on {} (sgpu pid {})\n  run dir:    {}\n", start_time(j),
                     j["host"].is_string() ? j["host"].get<std::string>() : "?", j["sgpu_pid"].dump(), run.dir);
  bool sampled = false;
  for (const auto& r : ranks) sampled = sampled || r.value("sample", ordered_json()).is_object();
  out +=
      fmt::format("  {:>4}  {:<12}  {:>8}  {:<18}  {:>7}  {:>9}", "rank", "host", "pid", "state", "exit", "duration");
  out += sampled ? fmt::format("  {:>6}  {:>8}  {:>8}  {:>7}\n", "cpu%", "rss MiB", "step", "steps/s") : "\n";
  for (const auto& r : ranks) {
    std::string exit = r["exit_code"].is_number() ? std::to_string(r["exit_code"].get<int>())
                       : r["signal"].is_string()  ? r["signal"].get<std::string>()
                                                  : "-";
    out += fmt::format("  {:>4}  {:<12}  {:>8}  {:<18}  {:>7}  {:>9}", r["rank"].get<int>(),
                       r["host"].is_string() ? r["host"].get<std::string>() : "",
                       r["pid"].is_number() ? std::to_string(r["pid"].get<int>()) : "-", r["state"].get<std::string>(),
                       exit, r["duration_s"].is_number() ? short_duration(r["duration_s"].get<double>()) : "-");
    if (sampled) {
      const auto& s = r["sample"];
      std::string rss = s.is_object() && s.contains("rss_bytes") && s["rss_bytes"].is_number()
                            ? fmt::format("{:.0f}", s["rss_bytes"].get<double>() / (1 << 20))
                            : "-";
      out += fmt::format("  {:>6}  {:>8}  {:>8}  {:>7}{}", sample_field(s, "cpu_percent", "{:.0f}"), rss,
                         sample_field(s, "step", "{:.0f}"), sample_field(s, "step_rate", "{:.2f}"),
                         r.value("straggler", false) ? "  straggler" : "");
    }
    out += "\n";
  }
  return out;
}

Command add_status(CLI::App& app) {
  struct Flags : Common {
    std::string run;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("status", "One run's state and its ranks (attached or detached runs alike)");
  cmd->add_option("RUN", f->run, "a run name, a run id, a unique prefix of one, or 'last'")->required();
  add_common(cmd, *f);
  return [f](const DashTail&) {
    auto run = launcher::find_run(f->root(), f->run);
    auto ranks = launcher::rank_table(run);
    // Kept in a variable: a range-for over a member of a temporary would read it after its end (C++20).
    auto samples = launcher::newest_samples(run);
    with_samples(ranks, samples);
    if (f->json()) {
      auto doc = launcher::run_json(run);
      doc["ranks"] = ranks;
      doc["gpus"] = ordered_json::array();
      for (const auto& [key, gpu] : samples["gpus"].items()) doc["gpus"].push_back(gpu);
      print_json(doc);
    } else {
      launcher::output(status_text(run, ranks));
    }
    return 0;
  };
}

Command add_logs(CLI::App& app) {
  struct Flags : Common {
    std::string run;
    std::vector<int> rank;
    std::string ranks;
    bool stderr_only = false;
    bool follow = false;
    std::optional<std::size_t> tail;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("logs", "A run's rank output, prefixed as on the console; -f follows it to its end");
  cmd->add_option("RUN", f->run, "a run name, a run id, a unique prefix of one, or 'last'")->required();
  cmd->add_option("--rank", f->rank, "only this rank (repeatable)")->allow_extra_args(false);
  cmd->add_option("--ranks", f->ranks, "only these ranks: 0,3 or 0-3");
  cmd->add_flag("--stderr", f->stderr_only, "only the ranks' stderr (default: stdout to stdout, stderr to stderr)");
  cmd->add_flag("-f,--follow", f->follow, "follow until the run ends, then exit with its exit code");
  cmd->add_option("--tail", f->tail, "the last N lines of each rank first")->check(at_least(0));
  add_common(cmd, *f);
  return [f](const DashTail&) {
    auto run = launcher::find_run(f->root(), f->run);
    refuse_unreadable(run, "show the logs of");
    launcher::LogOptions o;
    // Each rank checked against the flag that named it.
    auto add = [&](int r, const char* flag) {
      if (r < 0 || r >= run.world_size)
        throw Error(fmt::format("{} {}: run {} has {} rank{} (0-{})", flag, r, run.id, run.world_size,
                                run.world_size == 1 ? "" : "s", run.world_size - 1));
      o.ranks.push_back(r);
    };
    for (int r : f->rank) add(r, "--rank");
    if (!f->ranks.empty())
      for (int r : env::parse_rank_list(f->ranks, "--ranks")) add(r, "--ranks");
    std::sort(o.ranks.begin(), o.ranks.end());
    o.ranks.erase(std::unique(o.ranks.begin(), o.ranks.end()), o.ranks.end());
    o.stderr_only = f->stderr_only;
    o.tail = f->tail;
    o.follow = f->follow;
    o.json = f->json();
    return launcher::print_logs(run, o);
  };
}

void print_end(const Common& c, const RunInfo& run) {
  if (c.json()) {
    print_json(launcher::run_json(run));
    return;
  }
  auto j = launcher::run_json(run);
  if (run.state == RunState::Lost)
    launcher::diagnostic("sgpu: run {} was lost: its sgpu (pid {}) ended without recording how the run ended\n", run.id,
                         j["sgpu_pid"].dump());
  else
    launcher::diagnostic("sgpu: run {} {} (exit code {})\n", run.id, j["state"].get<std::string>(), exit_text(j));
}

Command add_wait(CLI::App& app) {
  struct Flags : Common {
    std::string run;
    std::string timeout;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("wait", "Block until a run ends; exit with its exit code");
  cmd->add_option("RUN", f->run, "a run name, a run id, a unique prefix of one, or 'last'")->required();
  cmd->add_option("--timeout", f->timeout, "give up after this long (90s, 10m, ...): exit 75, the run goes on");
  add_common(cmd, *f);
  return [f](const DashTail&) {
    std::optional<std::chrono::milliseconds> limit;
    if (!f->timeout.empty())
      if (auto d = env::parse_duration(f->timeout, "--timeout"))
        limit = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
    auto run = launcher::find_run(f->root(), f->run);
    refuse_unreadable(run, "wait for");
    auto ended = launcher::wait_for_run(run, limit);
    if (!ended) {
      launcher::diagnostic("sgpu: run {} is still running after --timeout {}\n", run.id, f->timeout);
      if (f->json()) print_json(launcher::run_json(run));
      return kExitWaitTimedOut;
    }
    print_end(*f, *ended);
    return launcher::run_exit_code(*ended);
  };
}

Command add_cancel(CLI::App& app) {
  struct Flags : Common {
    std::string run;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "cancel", "Stop a run as Ctrl-C does (SIGTERM to every rank, SIGKILL after the grace); returns once it ended");
  cmd->add_option("RUN", f->run, "a run name, a run id, a unique prefix of one, or 'last'")->required();
  add_common(cmd, *f);
  return [f](const DashTail&) {
    auto run = launcher::find_run(f->root(), f->run);
    refuse_unreadable(run, "cancel");
    bool was_running = run.state == RunState::Running;
    auto ended = launcher::cancel_run(run);
    if (!was_running && !f->json()) launcher::diagnostic("sgpu: run {} had already ended\n", run.id);
    print_end(*f, ended);
    return 0;
  };
}

Command add_stacks(CLI::App& app) {
  struct Flags : Common {
    std::string run;
    bool native = false;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "stacks",
      "Every rank's stack of a running run, on every node, without stopping it: ranks with the same stack "
      "grouped, the odd ones out named (py-spy; eu-stack for native ranks)");
  cmd->add_option("RUN", f->run,
                  "a run name, a run id, a unique prefix of one, or 'last' (default: the newest running run)");
  cmd->add_flag("--native", f->native, "native frames too (py-spy --native)");
  add_common(cmd, *f);
  return [f](const DashTail&) {
    RunInfo run;
    if (f->run.empty()) {
      auto runs = launcher::list_runs(f->root());
      auto it = std::find_if(runs.begin(), runs.end(), [](const RunInfo& r) { return r.state == RunState::Running; });
      if (it == runs.end()) throw Error(fmt::format("no run is running in {}; name one: sgpu stacks RUN", f->root()));
      run = *it;
    } else {
      run = launcher::find_run(f->root(), f->run);
    }
    if (run.state != RunState::Running)
      throw Error(fmt::format("run {} is not running ({}); the stacks taken while it ran are in {}/stacks/", run.id,
                              launcher::run_state_name(run.state), run.dir));
    auto reply = launcher::ask_run(run.dir, {{"op", "stacks"}, {"native", f->native}}, 60);
    if (!reply.value("ok", false))
      throw Error(fmt::format("run {}: {}", run.id, reply.value("error", std::string("no answer"))));
    if (f->json()) {
      auto doc = reply["stacks"];
      doc["run_id"] = run.id;
      doc["dir"] = reply["dir"];
      doc["seconds"] = reply["seconds"];
      launcher::output(doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    } else {
      launcher::output(fmt::format("run {}: {}", run.id, reply.value("text", std::string())));
    }
    return 0;
  };
}

Command add_prune(CLI::App& app) {
  struct Flags : Common {
    std::string older_than;
    std::optional<int> keep;
    bool dry_run = false;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand("prune", "Remove finished runs (never a running one)");
  cmd->add_option("--older-than", f->older_than, "only runs that ended longer ago than this (7d, 12h, ...)");
  cmd->add_option("--keep", f->keep, "keep the newest N runs")->check(at_least(0));
  cmd->add_flag("--dry-run", f->dry_run, "list what would be removed; remove nothing");
  add_common(cmd, *f);
  return [f](const DashTail&) {
    launcher::PruneRule rule;
    rule.keep = f->keep;
    if (!f->older_than.empty()) {
      auto d = env::parse_duration(f->older_than, "--older-than");
      if (!d) throw Error("--older-than none: give a duration such as 7d or 12h");
      rule.older_than = std::chrono::duration_cast<std::chrono::seconds>(*d);
    }
    if (!rule.keep && !rule.older_than)
      throw Error("prune needs --keep N or --older-than D (or both) to say which finished runs to remove");
    auto out = launcher::prune_runs(f->root(), rule, f->dry_run);
    // What launches retired and left for their batch goes too.
    if (!f->dry_run)
      for (auto& e : launcher::empty_trash(f->root(), std::numeric_limits<int>::max())) out.errors.push_back(e);
    if (f->json()) {
      print_json({{"removed", out.removed}, {"dry_run", f->dry_run}, {"errors", out.errors}});
    } else {
      for (const auto& id : out.removed)
        launcher::output(fmt::format("{}{}\n", f->dry_run ? "would remove " : "removed ", id));
      launcher::diagnostic("sgpu: {} {} run{}\n", f->dry_run ? "would remove" : "removed", out.removed.size(),
                           out.removed.size() == 1 ? "" : "s");
    }
    for (const auto& e : out.errors) launcher::diagnostic("sgpu: warning: {}\n", e);
    return out.errors.empty() ? 0 : 1;
  };
}

}  // namespace

std::vector<std::pair<std::string, Command>> add_run_commands(CLI::App& app) {
  std::array<Command (*)(CLI::App&), kRunCommandNames.size()> adders = {add_runs,   add_status, add_logs,  add_wait,
                                                                        add_cancel, add_stacks, add_prune, add_top};
  std::vector<std::pair<std::string, Command>> commands;
  for (std::size_t i = 0; i < adders.size(); ++i) commands.emplace_back(kRunCommandNames[i], adders[i](app));
  return commands;
}

}  // namespace sgpu::app
