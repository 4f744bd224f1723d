#include "sgpu/launcher/outputs/run_log.hpp"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/outputs/rank_hosts.hpp"
#include "sgpu/launcher/outputs/signal_before.hpp"

namespace sgpu::launcher {

namespace fs = std::filesystem;

namespace {
// Every file a rank leaves in its directory, in the order they are kept.
constexpr const char* kRankFiles[] = {"stdout", "stderr", "error.json", "result"};

std::size_t log_index(int rank, Stream stream) {
  return static_cast<std::size_t>(rank) * 2 + (stream == Stream::Out ? 0 : 1);
}
}  // namespace

nlohmann::ordered_json rank_exited_event(int rank, const std::string& host, int pid, const env::ExitStatus& status,
                                         bool terminated_by_sgpu, double duration_s, int attempt) {
  nlohmann::ordered_json e = {{"event", "rank_exited"}, {"rank", rank}, {"host", host},
                              {"attempt", attempt},     {"pid", pid},   {"exit_code", nullptr},
                              {"signal", nullptr}};
  if (status.code) e["exit_code"] = *status.code;
  if (status.signal) e["signal"] = env::signal_name(*status.signal);
  e["terminated_by_sgpu"] = terminated_by_sgpu;
  e["duration_s"] = duration_s;
  return e;
}

nlohmann::ordered_json teardown_event(const env::JobEnd& cause, int attempt) {
  nlohmann::ordered_json e = {{"event", "teardown"}, {"attempt", attempt}, {"reason", env::job_end_name(cause.kind)}};
  if (cause.kind == env::JobEnd::Kind::RankFailed || cause.kind == env::JobEnd::Kind::SpawnFailed)
    e["rank"] = cause.rank;
  if (cause.kind == env::JobEnd::Kind::Interrupted || cause.kind == env::JobEnd::Kind::Preempted)
    e["signal"] = env::signal_name(cause.signal);
  if (!cause.host.empty()) e["host"] = cause.host;
  if (cause.kind == env::JobEnd::Kind::NodeLost) e["lost"] = cause.reason;
  return e;
}

nlohmann::ordered_json restart_event(int attempt, const env::JobEnd& cause, env::Seconds backoff) {
  nlohmann::ordered_json e = {{"event", "restart"},
                              {"attempt", attempt},
                              {"after", env::job_end_name(cause.kind)},
                              {"exit_code", env::job_exit_code(cause)}};
  if (cause.rank >= 0) e["rank"] = cause.rank;
  if (!cause.host.empty()) e["host"] = cause.host;
  e["backoff_s"] = backoff.count();
  return e;
}

std::string attempt_dir(const std::string& run_dir, int rank, int attempt) {
  return (fs::path(rank_dir(run_dir, rank)) / fmt::format("attempt-{}", attempt)).string();
}

RunLog::RunLog(boost::asio::io_context& io, const std::string& run_dir, int world_size, std::string host,
               std::vector<std::string> rank_hosts)
    : run_dir_(run_dir),
      host_(std::move(host)),
      rank_hosts_(std::move(rank_hosts)),
      started_(static_cast<std::size_t>(world_size)),
      pids_(static_cast<std::size_t>(world_size), -1),
      writer_(io) {
  // Never grows after this: the writer holds pointers into it.
  logs_.reserve(static_cast<std::size_t>(world_size) * 2);
  // Opened on first output: see AppendFile::deferred.
  for (int r = 0; r < world_size; ++r) {
    logs_.push_back(AppendFile::deferred(rank_log_path(run_dir, r, Stream::Out)));
    logs_.push_back(AppendFile::deferred(rank_log_path(run_dir, r, Stream::Err)));
  }
  events_ = AppendFile((std::filesystem::path(run_dir) / "events.jsonl").string(), true);
}

void RunLog::append_event(const nlohmann::ordered_json& event) {
  constexpr auto kReplace = nlohmann::ordered_json::error_handler_t::replace;
  std::string line;
  if (event.is_object() && !event.empty() && !event.contains("ts")) {
    // {"ts":"...", then the event's own keys: the event dumped as it is, not
    // copied into a new document first (a launch writes two events a rank).
    auto body = event.dump(-1, ' ', false, kReplace);
    line.reserve(body.size() + 40);
    line.append("{\"ts\":\"").append(iso_time(Clock::now())).append("\",").append(body, 1).append("\n");
  } else {
    nlohmann::ordered_json doc = {{"ts", iso_time(Clock::now())}};
    doc.update(event);
    line = doc.dump(-1, ' ', false, kReplace) + "\n";
  }
  // One write per line on an O_APPEND file: lines from several writers never interleave.
  events_.append(line);
}

const std::string& RunLog::host_of(int rank) const {
  auto r = static_cast<std::size_t>(rank);
  return r < rank_hosts_.size() && !rank_hosts_[r].empty() ? rank_hosts_[r] : host_;
}

void RunLog::on_nodes_placed(const std::vector<NodePlacement>& nodes) { apply_placement(rank_hosts_, nodes); }

void RunLog::on_rank_started(int rank, int pid) {
  started_.at(static_cast<std::size_t>(rank)) = Clock::now();
  pids_.at(static_cast<std::size_t>(rank)) = pid;
  append_event(
      {{"event", "rank_started"}, {"rank", rank}, {"host", host_of(rank)}, {"attempt", attempt_}, {"pid", pid}});
}

void RunLog::on_rank_output(int rank, Stream stream, std::string_view bytes, const BytesOwner& owner) {
  writer_.append(logs_[log_index(rank, stream)], bytes, owner);
}

void RunLog::on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) {
  std::chrono::duration<double> took = Clock::now() - started_.at(static_cast<std::size_t>(rank));
  append_event(rank_exited_event(rank, host_of(rank), pids_.at(static_cast<std::size_t>(rank)), status,
                                 terminated_by_sgpu, took.count(), attempt_));
}

void RunLog::on_teardown(const env::JobEnd& cause) { append_event(teardown_event(cause, attempt_)); }

void RunLog::on_signal_before(const env::SignalBefore& signal, Clock::time_point deadline, bool sent) {
  nlohmann::ordered_json e = {{"event", "signal_before"}, {"attempt", attempt_}};
  e.update(signal_before_json({signal, deadline, sent ? std::optional(Clock::now()) : std::nullopt}));
  append_event(e);
}

void RunLog::on_restart(int attempt, const env::JobEnd& cause, env::Seconds backoff) {
  append_event(restart_event(attempt, cause, backoff));
}

void RunLog::on_attempt_started(int attempt) {
  writer_.drain();
  archive(attempt_, false);
  for (auto& f : logs_) f = AppendFile::deferred(f.path());
  attempt_ = attempt;
  append_event({{"event", "attempt_started"}, {"attempt", attempt}});
}

void RunLog::on_excluded(const Exclusion& e) {
  append_event({{"event", "excluded"},
                {"host", e.host.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.host)},
                {"gpu", e.gpu >= 0 ? nlohmann::ordered_json(e.gpu) : nlohmann::ordered_json(nullptr)},
                {"reason", e.reason},
                {"attempt", e.attempt}});
}

void RunLog::reopen() {
  writer_.drain();
  for (auto& f : logs_) f = AppendFile::deferred(f.path());
  events_ = AppendFile(events_.path(), true);
}

void RunLog::keep_last_attempt() {
  writer_.drain();
  if (attempt_ > 0) archive(attempt_, true);
}

// Every rank of this node keeps both logs, empty or not: the first empty one
// is made, the others are hard links to it (eight ranks of /bin/true: one
// inode, not 16). A rank of another node that sent nothing has no directory
// here, and gets none: its node keeps its files, and 16384 empty directories
// made at the end cost the launcher seconds before it could exit.
void RunLog::create_empty_logs() {
  const AppendFile* empty = nullptr;
  for (std::size_t i = 0; i < logs_.size(); ++i) {
    auto& f = logs_[i];
    if (!f.is_deferred()) continue;
    if (empty != nullptr && f.create_as_link_to(empty->path())) continue;
    if (!runs_here(static_cast<int>(i / 2)) && !fs::exists(fs::path(f.path()).parent_path())) continue;
    f.create();
    if (f.error().empty() && !f.is_deferred()) empty = &f;
  }
}

bool RunLog::runs_here(int rank) const {
  const auto& h = host_of(rank);
  return h.empty() || h == host_;
}

void RunLog::archive(int attempt, bool link) {
  create_empty_logs();
  auto ranks = static_cast<int>(logs_.size() / 2);
  for (int r = 0; r < ranks; ++r) {
    auto dir = fs::path(attempt_dir(run_dir_, r, attempt));
    std::error_code ec;
    fs::create_directories(dir, ec);
    for (const char* name : kRankFiles) {
      auto from = fs::path(rank_dir(run_dir_, r)) / name;
      if (!fs::exists(from, ec)) continue;
      if (link)
        fs::create_hard_link(from, dir / name, ec);
      else
        fs::rename(from, dir / name, ec);
      if (ec)
        archive_errors_.push_back(
            fmt::format("{}: cannot keep it in {}: {}", from.string(), dir.string(), ec.message()));
    }
  }
}

std::vector<std::string> RunLog::write_errors() {
  writer_.drain();
  std::vector<std::string> out;
  create_empty_logs();
  for (auto& f : logs_) {
    if (!f.error().empty()) out.push_back(f.path() + ": " + f.error());
  }
  if (!events_.error().empty()) out.push_back(events_.path() + ": " + events_.error());
  for (const auto& e : archive_errors_) out.push_back(e);
  return out;
}

}  // namespace sgpu::launcher
