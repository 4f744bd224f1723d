#include "sgpu/launcher/runs/registry.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/run_name.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/runs/idempotency.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr std::size_t kStateFileLimit = 64 << 10;
constexpr std::size_t kSummaryLimit = 64 << 20;
constexpr std::size_t kEventsLimit = 64 << 20;
constexpr std::size_t kMetricsTail = 1 << 20;  // metrics.jsonl's end: the newest sample of ~2000 ranks

std::string join(const std::string& dir, const char* name) { return dir + "/" + name; }

template <class T>
std::optional<T> get_opt(const json& doc, const char* key) {
  auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return std::nullopt;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return std::nullopt;
  }
}

std::optional<std::chrono::system_clock::time_point> time_at(const json& doc, const char* key) {
  auto text = get_opt<std::string>(doc, key);
  return text ? parse_iso_time(*text) : std::nullopt;
}
}  // namespace

bool run_lock_held(const std::string& run_dir) {
  int fd = ::open(join(run_dir, kRunLockFile).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  int rc = ::flock(fd, LOCK_SH | LOCK_NB);
  bool held = rc != 0 && errno == EWOULDBLOCK;
  ::close(fd);  // also drops the shared lock taken when it was free
  return held;
}

std::vector<std::string> run_ids(const std::string& root) {
  std::vector<std::string> ids;
  DIR* dir = ::opendir(root.c_str());
  if (dir == nullptr) return ids;
  while (auto* entry = ::readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name.starts_with('.')) continue;
    if (entry->d_type != DT_DIR && entry->d_type != DT_UNKNOWN) continue;
    ids.emplace_back(name);
  }
  ::closedir(dir);
  std::sort(ids.begin(), ids.end(), std::greater<>());
  return ids;
}

namespace {
// A run whose state.json still says running, but whose sgpu is gone: when
// sgpu recorded the end elsewhere (events.jsonl's run_finished, written
// after it, or summary.json, before it), it could not write state.json (a
// full disk), and the run ended as recorded there; else it was lost.
void recover_end(RunInfo& run) {
  json end;
  if (auto tail = read_file(join(run.dir, "events.jsonl"), kStateFileLimit, true)) {
    auto last = tail->find_last_of('\n', tail->empty() ? 0 : tail->size() - 2);
    auto line = json::parse(tail->substr(last == std::string::npos ? 0 : last + 1), nullptr, false);
    if (line.is_object() && line.value("event", "") == "run_finished") end = std::move(line);
  }
  const char* source = "events.jsonl";
  if (end.is_null()) {
    source = "summary.json";
    if (auto text = read_file(join(run.dir, "summary.json"), kSummaryLimit)) end = json::parse(*text, nullptr, false);
  }
  auto state = end.is_object() ? state_of_end_name(get_opt<std::string>(end, "status").value_or("")) : std::nullopt;
  auto code = end.is_object() ? get_opt<int>(end, "exit_code") : std::nullopt;
  if (!state || !code || *code < 0 || *code > 255) {
    run.state = RunState::Lost;
    return;
  }
  run.state = *state;
  run.exit_code = code;
  if (auto d = get_opt<double>(end, "duration_s"); d && std::isfinite(*d) && *d >= 0 && run.started)
    run.ended = *run.started +
                std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::duration<double>(*d));
  run.problem = fmt::format("{} was not updated at the end (a full disk?); the end is from {}", kRunStateFile, source);
}
}  // namespace

std::optional<RunInfo> read_run(const std::string& root, const std::string& id) {
  RunInfo run;
  run.id = id;
  run.dir = (fs::path(root) / id).string();
  std::string unreadable;
  auto text = read_file(join(run.dir, kRunStateFile), kStateFileLimit + 1, false, &unreadable);
  if (!text && unreadable.empty()) return std::nullopt;  // starting, or not a run
  auto state_path = join(run.dir, kRunStateFile);
  if (text && text->size() > kStateFileLimit)
    unreadable = fmt::format("over {} KiB", kStateFileLimit >> 10);
  else if (text)
    run.record = json::parse(*text, nullptr, false);
  if (unreadable.empty()) unreadable = run.record.is_discarded() ? "not valid JSON" : state_record_problem(run.record);
  if (!unreadable.empty()) {
    // Listed, never hidden: a reader that skipped it would take an older run for the newest.
    run.state = RunState::Unknown;
    run.problem = fmt::format("{}: {}", state_path, unreadable);
    if (run.record.is_object()) run.started = time_at(run.record, "started_at");  // for the order alone
    run.record = json::object();
    return run;
  }
  run.started = time_at(run.record, "started_at");
  run.ended = time_at(run.record, "ended_at");
  run.exit_code = get_opt<int>(run.record, "exit_code");
  run.world_size = run.record["world_size"].get<int>();
  run.state = *parse_run_state(run.record["state"].get<std::string>());
  if (run.state == RunState::Running && !run_lock_held(run.dir)) recover_end(run);
  return run;
}

namespace {
// Runs started in the same second are put in order by their recorded start
// (milliseconds).
void order_newest_first(std::vector<RunInfo>& runs) {
  std::stable_sort(runs.begin(), runs.end(), [](const RunInfo& a, const RunInfo& b) {
    if (!same_second(a.id, b.id)) return a.id > b.id;
    return a.started.value_or(std::chrono::system_clock::time_point{}) >
           b.started.value_or(std::chrono::system_clock::time_point{});
  });
}
}  // namespace

std::vector<RunInfo> list_runs(const std::string& root, std::optional<std::size_t> limit) {
  std::vector<RunInfo> runs;
  for (const auto& id : run_ids(root)) {
    // Past the limit, read on only while the ids share the last one's second.
    if (limit && runs.size() >= *limit && !same_second(runs.back().id, id)) break;
    if (auto run = read_run(root, id)) runs.push_back(std::move(*run));
  }
  order_newest_first(runs);
  if (limit && runs.size() > *limit) runs.resize(*limit);
  return runs;
}

RunInfo find_run(const std::string& root, const std::string& query) {
  // Names start with a letter, ids with a digit: a RUN is one or the other.
  if (env::is_run_name_query(query)) {
    if (auto run = newest_run_named(root, query)) return *run;
    throw Error(
        fmt::format("no run named '{}' in {} (a RUN that starts with a letter is a --name; give a name, a "
                    "run id, a unique prefix of one, or 'last'; 'sgpu runs' lists them)",
                    query, root));
  }
  std::vector<std::string> ids;
  if (query == "last") {
    auto newest = list_runs(root, 1);
    if (!newest.empty()) return newest.front();
  }
  for (auto& id : run_ids(root))
    if (fs::exists(fs::path(root) / id / kRunStateFile)) ids.push_back(std::move(id));
  auto id = resolve_run_id(ids, query, root);
  auto run = read_run(root, id);
  if (!run) throw Error(fmt::format("{}: cannot read {}", (fs::path(root) / id).string(), kRunStateFile), 1);
  return *run;
}

std::optional<double> run_duration_s(const RunInfo& run) {
  if (run.state == RunState::Unknown) return std::nullopt;
  if (auto d = get_opt<double>(run.record, "duration_s"); d && run.problem.empty()) return *d;
  if (!run.started) return std::nullopt;
  // A lost run's end is unknown: its sgpu died without a word.
  auto end = run.state == RunState::Running ? std::optional(std::chrono::system_clock::now()) : run.ended;
  if (!end || *end < *run.started) return std::nullopt;
  return std::chrono::duration<double>(*end - *run.started).count();
}

nlohmann::ordered_json run_json(const RunInfo& run) {
  const auto& r = run.record;
  auto field = [&](const char* key) { return r.contains(key) ? r[key] : json(nullptr); };
  auto duration = run_duration_s(run);
  nlohmann::ordered_json out = {{"run_id", run.id},
                                {"run_dir", run.dir},
                                {"state", run_state_name(run.state)},
                                {"host", field("host")},
                                {"sgpu_pid", field("sgpu_pid")},
                                {"detached", r.value("detached", false)},
                                {"started_at", field("started_at")},
                                {"ended_at", run.ended ? json(iso_time(*run.ended)) : json(nullptr)},
                                {"duration_s", duration ? json(std::round(*duration * 1000) / 1000) : json(nullptr)},
                                {"world_size", run.world_size},
                                {"nnodes", r.value("nnodes", 1)},
                                {"exit_code", run.exit_code ? json(*run.exit_code) : json(nullptr)},
                                {"entrypoint", field("entrypoint")},
                                {"name", field("name")},
                                {"idempotency_key", field("idempotency_key")}};
  if (!run.problem.empty()) out["problem"] = run.problem;
  return out;
}

nlohmann::ordered_json rank_table(const RunInfo& run) {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  if (run.state != RunState::Running && run.state != RunState::Lost) {
    if (auto text = read_file(join(run.dir, "summary.json"), kSummaryLimit)) {
      auto summary = json::parse(*text, nullptr, false);
      if (summary.is_object() && summary.contains("ranks") && summary["ranks"].is_array()) {
        for (const auto& r : summary["ranks"])
          ranks.push_back({{"rank", r.value("rank", -1)},
                           {"host", r.value("host", "")},
                           {"pid", r.contains("pid") ? r["pid"] : json(nullptr)},
                           {"state", r.value("verdict", "")},
                           {"exit_code", r.contains("exit_code") ? r["exit_code"] : json(nullptr)},
                           {"signal", r.contains("signal") ? r["signal"] : json(nullptr)},
                           {"duration_s", r.contains("duration_s") ? r["duration_s"] : json(nullptr)}});
        return ranks;
      }
    }
  }
  // Still running (or lost): the event stream says what each rank did so far.
  for (int i = 0; i < run.world_size; ++i)
    ranks.push_back({{"rank", i},
                     {"host", ""},
                     {"pid", nullptr},
                     {"state", "not_started"},
                     {"exit_code", nullptr},
                     {"signal", nullptr},
                     {"duration_s", nullptr}});
  auto events = read_file(join(run.dir, "events.jsonl"), kEventsLimit);
  if (!events) return ranks;
  std::size_t start = 0;
  while (start < events->size()) {
    auto end = events->find('\n', start);
    if (end == std::string::npos) break;  // a line being written
    auto ev = json::parse(std::string_view(*events).substr(start, end - start), nullptr, false);
    start = end + 1;
    if (!ev.is_object() || !ev.contains("rank")) continue;
    auto rank = ev.value("rank", -1);
    if (rank < 0 || rank >= run.world_size) continue;
    auto& row = ranks[static_cast<std::size_t>(rank)];
    auto kind = ev.value("event", "");
    if (kind == "rank_started") {
      row["host"] = ev.value("host", "");
      row["pid"] = ev.contains("pid") ? ev["pid"] : json(nullptr);
      row["state"] = "running";
    } else if (kind == "rank_exited") {
      row["host"] = ev.value("host", "");
      row["exit_code"] = ev.contains("exit_code") ? ev["exit_code"] : json(nullptr);
      row["signal"] = ev.contains("signal") ? ev["signal"] : json(nullptr);
      row["duration_s"] = ev.contains("duration_s") ? ev["duration_s"] : json(nullptr);
      bool ok = ev["exit_code"].is_number() && ev["exit_code"].get<int>() == 0;
      row["state"] = ok ? "ok" : ev.value("terminated_by_sgpu", false) ? "terminated_by_sgpu" : "failed";
    }
  }
  return ranks;
}

nlohmann::ordered_json newest_samples(const RunInfo& run) {
  nlohmann::ordered_json out = {{"ranks", nlohmann::ordered_json::object()},
                                {"gpus", nlohmann::ordered_json::object()},
                                {"stragglers", nlohmann::ordered_json::array()}};
  // The end of the file holds every rank's newest line: a sample is a line per rank and GPU.
  auto text = read_file(join(run.dir, kRunMetricsFile), kMetricsTail, true);
  if (text) {
    std::string_view rest(*text);
    if (text->size() >= kMetricsTail) rest.remove_prefix(std::min(rest.size(), rest.find('\n') + 1));  // cut line
    while (!rest.empty()) {
      auto end = rest.find('\n');
      if (end == std::string_view::npos) break;  // a line being written
      auto line = nlohmann::ordered_json::parse(rest.substr(0, end), nullptr, false);
      rest.remove_prefix(end + 1);
      if (!line.is_object()) continue;
      if (line.contains("rank") && line["rank"].is_number_integer())
        out["ranks"][std::to_string(line["rank"].get<int>())] = line;  // the newest line of each rank wins
      else if (line.contains("gpu") && line["gpu"].is_number_integer())
        out["gpus"][fmt::format("{}/{}", line["host"].is_string() ? line["host"].get<std::string>() : "",
                                line["gpu"].get<int>())] = line;
    }
  }
  for (const auto& [rank, line] : out["ranks"].items())
    if (line.contains("straggler") && line["straggler"] == true) out["stragglers"].push_back(line["rank"]);
  return out;
}

PruneOutcome prune_runs(const std::string& root, const PruneRule& rule, bool dry_run) {
  std::vector<PruneCandidate> candidates;
  auto ids = run_ids(root);
  std::size_t first_read = 0;
  if (rule.keep && !rule.older_than) {
    // The newest `keep` runs stay whatever their state, so they are only
    // counted (is there a state.json?), not read: a launch's retention reads
    // the few runs it may remove, not a hundred. The second at the boundary is
    // read whole, since runs of one second are ordered by their recorded start.
    auto is_run = [&](const std::string& id) { return fs::exists(fs::path(root) / id / kRunStateFile); };
    std::size_t counted = 0;
    while (first_read < ids.size() && static_cast<long long>(counted) < *rule.keep)
      counted += is_run(ids[first_read++]) ? 1 : 0;
    while (first_read > 0 && first_read < ids.size() && same_second(ids[first_read - 1], ids[first_read]))
      counted -= is_run(ids[--first_read]) ? 1 : 0;
    candidates.resize(counted);  // kept: never selected, but they count
  }
  // Directories without a state.json (starting, or not runs) are never listed, so never removed.
  std::vector<RunInfo> older;
  for (auto it = ids.begin() + static_cast<std::ptrdiff_t>(first_read); it != ids.end(); ++it)
    if (auto run = read_run(root, *it)) older.push_back(std::move(*run));
  order_newest_first(older);
  for (const auto& run : older) {
    PruneCandidate c;
    c.id = run.id;
    c.finished = run.state != RunState::Running;
    c.ended = run.ended.value_or(run.started.value_or(std::chrono::system_clock::time_point{}));
    candidates.push_back(std::move(c));
  }
  PruneOutcome out;
  for (auto& id : select_prune(candidates, rule, std::chrono::system_clock::now())) {
    auto dir = fs::path(root) / id;
    // Checked again at the last moment: a run is never removed while its lock is held.
    if (run_lock_held(dir.string())) continue;
    if (!dry_run) {
      std::error_code ec;
      fs::remove_all(dir, ec);
      if (ec && fs::exists(dir)) {
        out.errors.push_back(fmt::format("{}: {}", dir.string(), ec.message()));
        continue;
      }
    }
    out.removed.push_back(std::move(id));
  }
  return out;
}

}  // namespace sgpu::launcher
