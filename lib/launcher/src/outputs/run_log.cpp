#include "sgpu/launcher/outputs/run_log.hpp"

#include <filesystem>

#include "sgpu/env/exit_code.hpp"

namespace sgpu::launcher {

namespace {
std::size_t log_index(int rank, Stream stream) {
  return static_cast<std::size_t>(rank) * 2 + (stream == Stream::Out ? 0 : 1);
}
}  // namespace

nlohmann::ordered_json rank_exited_event(int rank, const std::string& host, int pid, const env::ExitStatus& status,
                                         bool terminated_by_sgpu, double duration_s) {
  nlohmann::ordered_json e = {{"event", "rank_exited"}, {"rank", rank}, {"host", host},
                              {"attempt", 0},           {"pid", pid},   {"exit_code", nullptr},
                              {"signal", nullptr}};
  if (status.code) e["exit_code"] = *status.code;
  if (status.signal) e["signal"] = env::signal_name(*status.signal);
  e["terminated_by_sgpu"] = terminated_by_sgpu;
  e["duration_s"] = duration_s;
  return e;
}

nlohmann::ordered_json teardown_event(const env::JobEnd& cause) {
  nlohmann::ordered_json e = {{"event", "teardown"}, {"reason", env::job_end_name(cause.kind)}};
  if (cause.kind == env::JobEnd::Kind::RankFailed || cause.kind == env::JobEnd::Kind::SpawnFailed)
    e["rank"] = cause.rank;
  if (cause.kind == env::JobEnd::Kind::Interrupted) e["signal"] = env::signal_name(cause.signal);
  if (!cause.host.empty()) e["host"] = cause.host;
  if (cause.kind == env::JobEnd::Kind::NodeLost) e["lost"] = cause.reason;
  return e;
}

RunLog::RunLog(const std::string& run_dir, int world_size, std::string host, std::vector<std::string> rank_hosts)
    : host_(std::move(host)),
      rank_hosts_(std::move(rank_hosts)),
      started_(static_cast<std::size_t>(world_size)),
      pids_(static_cast<std::size_t>(world_size), -1) {
  logs_.reserve(static_cast<std::size_t>(world_size) * 2);
  // Opened on first output: see AppendFile::deferred.
  for (int r = 0; r < world_size; ++r) {
    logs_.push_back(AppendFile::deferred(rank_log_path(run_dir, r, Stream::Out)));
    logs_.push_back(AppendFile::deferred(rank_log_path(run_dir, r, Stream::Err)));
  }
  events_ = AppendFile((std::filesystem::path(run_dir) / "events.jsonl").string(), true);
}

void RunLog::append_event(const nlohmann::ordered_json& event) {
  nlohmann::ordered_json line = {{"ts", iso_time(Clock::now())}};
  line.update(event);
  // One write per line on an O_APPEND file: lines from several writers never interleave.
  events_.append(line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
}

const std::string& RunLog::host_of(int rank) const {
  auto r = static_cast<std::size_t>(rank);
  return r < rank_hosts_.size() && !rank_hosts_[r].empty() ? rank_hosts_[r] : host_;
}

void RunLog::on_rank_started(int rank, int pid) {
  started_.at(static_cast<std::size_t>(rank)) = Clock::now();
  pids_.at(static_cast<std::size_t>(rank)) = pid;
  append_event({{"event", "rank_started"}, {"rank", rank}, {"host", host_of(rank)}, {"attempt", 0}, {"pid", pid}});
}

void RunLog::on_rank_output(int rank, Stream stream, std::string_view bytes) {
  logs_[log_index(rank, stream)].append(bytes);
}

void RunLog::on_rank_exited(int rank, const env::ExitStatus& status, bool terminated_by_sgpu) {
  std::chrono::duration<double> took = Clock::now() - started_.at(static_cast<std::size_t>(rank));
  append_event(rank_exited_event(rank, host_of(rank), pids_.at(static_cast<std::size_t>(rank)), status,
                                 terminated_by_sgpu, took.count()));
}

void RunLog::on_teardown(const env::JobEnd& cause) { append_event(teardown_event(cause)); }

std::vector<std::string> RunLog::write_errors() {
  std::vector<std::string> out;
  for (auto& f : logs_) {
    f.create();
    if (!f.error().empty()) out.push_back(f.path() + ": " + f.error());
  }
  if (!events_.error().empty()) out.push_back(events_.path() + ": " + events_.error());
  return out;
}

}  // namespace sgpu::launcher
