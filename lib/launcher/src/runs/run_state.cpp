#include "sgpu/launcher/runs/run_state.hpp"

#include <cmath>
#include <ctime>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {

namespace {
constexpr std::string_view kNames[] = {"running", "succeeded", "failed", "timed-out", "cancelled",
                                       "lost",    "unknown",   "hung",   "preempted"};
constexpr std::size_t kMaxCandidatesListed = 10;
}  // namespace

std::string_view run_state_name(RunState state) { return kNames[static_cast<int>(state)]; }

std::optional<RunState> parse_run_state(std::string_view name) {
  for (std::size_t i = 0; i < std::size(kNames); ++i)
    if (kNames[i] == name) return static_cast<RunState>(i);
  return std::nullopt;
}

RunState final_state(env::JobEnd::Kind kind) {
  if (kind == env::JobEnd::Kind::Preempted) return RunState::Preempted;
  switch (env::end_class(kind)) {
    case env::EndClass::Succeeded:
      return RunState::Succeeded;
    case env::EndClass::TimedOut:
      return RunState::TimedOut;
    case env::EndClass::Hung:
      return RunState::Hung;
    case env::EndClass::StoppedFromOutside:  // Ctrl-C, cancel, scancel, preemption
      return RunState::Cancelled;
    case env::EndClass::Failed:
      break;
  }
  return RunState::Failed;
}

std::optional<RunState> state_of_end_name(std::string_view name) {
  using Kind = env::JobEnd::Kind;
  for (auto kind : {Kind::Completed, Kind::RankFailed, Kind::TimedOut, Kind::Interrupted, Kind::SpawnFailed,
                    Kind::NodeLost, Kind::StoppedByScheduler, Kind::NotStarted, Kind::Hung, Kind::Preempted})
    if (env::job_end_name(kind) == name) return final_state(kind);
  return std::nullopt;
}

namespace {
// The largest values a state.json may hold (a node runs at most 4096 ranks).
constexpr long long kMaxWorldSize = 1 << 24;
constexpr long long kMaxNodes = 1 << 20;
constexpr long long kMaxPid = 1 << 22;  // the kernel's pid_max limit
constexpr long long kMaxExitCode = 255;

std::string field_problem(const nlohmann::json& record, const char* key, bool required, long long low, long long high) {
  auto it = record.find(key);
  if (it == record.end() || it->is_null()) return required ? fmt::format("'{}' is missing", key) : "";
  if (!it->is_number_integer()) return fmt::format("'{}' is {}, not an integer", key, it->dump());
  auto value = it->is_number_unsigned() && it->get<unsigned long long>() > static_cast<unsigned long long>(high)
                   ? high + 1
                   : it->get<long long>();
  if (value < low || value > high) return fmt::format("'{}' is {}, not {}..{}", key, it->dump(), low, high);
  return "";
}

std::string text_problem(const nlohmann::json& record, const char* key, bool required, bool time) {
  auto it = record.find(key);
  if (it == record.end() || it->is_null()) return required ? fmt::format("'{}' is missing", key) : "";
  if (!it->is_string()) return fmt::format("'{}' is {}, not a string", key, it->dump());
  if (time && !parse_iso_time(it->get<std::string>()))
    return fmt::format("'{}' is {}, not a time (YYYY-MM-DDTHH:MM:SS.mmmZ)", key, it->dump());
  return "";
}
}  // namespace

std::string state_record_problem(const nlohmann::json& record) {
  if (!record.is_object()) return "not a JSON object";
  auto problem = text_problem(record, "state", true, false);
  if (problem.empty() && !parse_run_state(record["state"].get<std::string>()))
    problem = fmt::format("'state' is {}, not one of running, succeeded, failed, timed-out, cancelled, preempted",
                          record["state"].dump());
  for (auto check : {+[](const nlohmann::json& r) { return text_problem(r, "started_at", true, true); },
                     +[](const nlohmann::json& r) { return text_problem(r, "ended_at", false, true); },
                     +[](const nlohmann::json& r) { return text_problem(r, "host", false, false); },
                     +[](const nlohmann::json& r) { return text_problem(r, "entrypoint", false, false); },
                     +[](const nlohmann::json& r) { return field_problem(r, "world_size", true, 0, kMaxWorldSize); },
                     +[](const nlohmann::json& r) { return field_problem(r, "nnodes", false, 1, kMaxNodes); },
                     +[](const nlohmann::json& r) { return field_problem(r, "sgpu_pid", false, 1, kMaxPid); },
                     +[](const nlohmann::json& r) { return field_problem(r, "exit_code", false, 0, kMaxExitCode); }}) {
    if (!problem.empty()) break;
    problem = check(record);
  }
  if (problem.empty() && record.contains("detached") && !record["detached"].is_boolean())
    problem = fmt::format("'detached' is {}, not true or false", record["detached"].dump());
  if (problem.empty() && record.contains("duration_s") && !record["duration_s"].is_null()) {
    const auto& d = record["duration_s"];
    if (!d.is_number() || !std::isfinite(d.get<double>()) || d.get<double>() < 0)
      problem = fmt::format("'duration_s' is {}, not a number of seconds", d.dump());
  }
  return problem;
}

RunState observed_state(RunState recorded, bool lock_held) {
  if (recorded == RunState::Running && !lock_held) return RunState::Lost;
  return recorded;
}

std::string resolve_run_id(const std::vector<std::string>& ids_newest_first, std::string_view query,
                           const std::string& root) {
  if (ids_newest_first.empty()) throw Error(fmt::format("no runs in {}", root));
  if (query == "last") return ids_newest_first.front();
  if (query.empty()) throw Error("RUN is empty: give a run id, a unique prefix of one, or 'last'");
  std::vector<std::string> matches;
  for (const auto& id : ids_newest_first) {
    if (id == query) return id;
    if (id.starts_with(query)) matches.push_back(id);
  }
  if (matches.size() == 1) return matches.front();
  if (matches.empty())
    throw Error(
        fmt::format("no run '{}' in {} (give a run id, a unique prefix of one, or 'last'; 'sgpu runs' "
                    "lists them)",
                    query, root));
  std::string listed;
  for (std::size_t i = 0; i < matches.size() && i < kMaxCandidatesListed; ++i) listed += "\n  " + matches[i];
  if (matches.size() > kMaxCandidatesListed)
    listed += fmt::format("\n  ... and {} more", matches.size() - kMaxCandidatesListed);
  throw Error(fmt::format("'{}' matches {} runs; give more of the id:{}", query, matches.size(), listed));
}

std::vector<std::string> select_prune(const std::vector<PruneCandidate>& newest_first, const PruneRule& rule,
                                      std::chrono::system_clock::time_point now) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < newest_first.size(); ++i) {
    const auto& c = newest_first[i];
    if (!c.finished) continue;
    if (rule.keep && static_cast<long long>(i) < *rule.keep) continue;
    if (rule.older_than && c.ended > now - *rule.older_than) continue;
    out.push_back(c.id);
  }
  return out;
}

std::optional<std::chrono::system_clock::time_point> parse_iso_time(std::string_view text) {
  // YYYY-MM-DDTHH:MM:SS[.mmm]Z
  std::tm tm{};
  int ms = 0;
  auto digits = [&](std::size_t at, std::size_t n, int& out) {
    if (at + n > text.size()) return false;
    out = 0;
    for (std::size_t i = at; i < at + n; ++i) {
      if (text[i] < '0' || text[i] > '9') return false;
      out = out * 10 + (text[i] - '0');
    }
    return true;
  };
  auto is = [&](std::size_t at, char c) { return at < text.size() && text[at] == c; };
  if (!digits(0, 4, tm.tm_year) || !is(4, '-') || !digits(5, 2, tm.tm_mon) || !is(7, '-') ||
      !digits(8, 2, tm.tm_mday) || !is(10, 'T') || !digits(11, 2, tm.tm_hour) || !is(13, ':') ||
      !digits(14, 2, tm.tm_min) || !is(16, ':') || !digits(17, 2, tm.tm_sec))
    return std::nullopt;
  std::size_t end = 19;
  if (is(19, '.')) {
    if (!digits(20, 3, ms)) return std::nullopt;
    end = 23;
  }
  if (!is(end, 'Z') || end + 1 != text.size()) return std::nullopt;
  if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 ||
      tm.tm_sec > 60)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  auto seconds = ::timegm(&tm);
  return std::chrono::system_clock::from_time_t(seconds) + std::chrono::milliseconds(ms);
}

}  // namespace sgpu::launcher
