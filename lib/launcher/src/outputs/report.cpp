#include "sgpu/launcher/outputs/report.hpp"

#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

namespace sgpu::launcher {

namespace {
using Kind = env::JobEnd::Kind;

bool is_root_cause(const RunReport& report, const RankReport& r) {
  return report.root_cause && report.root_cause->rank == r.rank &&
         (report.root_cause->kind == Kind::RankFailed || report.root_cause->kind == Kind::SpawnFailed);
}

std::string verdict_text(const RunReport& report, const RankReport& r) {
  auto name = rank_verdict_name(r);
  if (is_root_cause(report, r)) return name == "failed" ? "FAILED (root cause)" : "could not start (root cause)";
  if (name == "terminated_by_sgpu") return "terminated by sgpu";
  if (name == "not_started") return "not started";
  if (name == "lost") return "lost with its node";
  return name == "failed" ? "FAILED" : name;
}

std::string indent(std::string_view text, std::string_view by) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto nl = text.find('\n', start);
    auto line = text.substr(start, nl == std::string_view::npos ? std::string_view::npos : nl - start);
    out.append(by).append(line).push_back('\n');
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  return out;
}

std::string stopped_by_sgpu(const RunReport& report) {
  int n = 0;
  for (const auto& r : report.ranks) n += r.terminated_by_sgpu ? 1 : 0;
  if (n == 0) return {};
  return fmt::format("; {} {}rank{} stopped by sgpu", n, report.end.kind == Kind::RankFailed ? "other " : "",
                     n == 1 ? "" : "s");
}
}  // namespace

std::string rank_verdict_name(const RankReport& r) {
  if (!r.status) return r.pid > 0 ? "lost" : "not_started";
  if (r.status->success()) return "ok";
  return r.terminated_by_sgpu ? "terminated_by_sgpu" : "failed";
}

std::string exit_text(const std::optional<env::ExitStatus>& status) {
  if (!status) return "-";
  if (status->signal) return env::signal_name(*status->signal);
  return std::to_string(status->code.value_or(-1));
}

double duration_seconds(Clock::time_point from, Clock::time_point to) {
  if (from == Clock::time_point{} || to < from) return 0;
  return std::chrono::duration<double>(to - from).count();
}

std::string failure_message(int rank, const std::string& host, int pid, const env::ExitStatus& status) {
  return fmt::format("rank {} (pid {} on {}) {}", rank, pid, host,
                     status.signal ? "was killed by " + status.describe() : "exited with code " + exit_text(status));
}

std::string headline(const RunReport& report) {
  const auto& end = report.end;
  switch (end.kind) {
    case Kind::Completed:
      return fmt::format(
          "sgpu: {} rank{} exited 0 in {}; logs in {}", report.ranks.size(), report.ranks.size() == 1 ? "" : "s",
          env::format_duration(env::Seconds(duration_seconds(report.started, report.ended))), report.run_dir);
    case Kind::RankFailed:
      return fmt::format("sgpu: rank {}{} failed first: {}{} (exit code {})", end.rank,
                         end.host.empty() ? "" : fmt::format(" ({})", end.host), end.status.describe(),
                         stopped_by_sgpu(report), report.exit_code);
    case Kind::TimedOut:
      return fmt::format("sgpu: error: the job timed out after {} (--timeout){} (exit code 124)",
                         report.timeout ? env::format_duration(*report.timeout) : "?", stopped_by_sgpu(report));
    case Kind::Interrupted:
      return fmt::format("sgpu: interrupted by {}{}{} (exit code {})", env::signal_name(end.signal),
                         end.host.empty() ? "" : " on " + end.host, stopped_by_sgpu(report), report.exit_code);
    case Kind::SpawnFailed:
      return fmt::format("sgpu: error: cannot start rank {}{}: {}", end.rank, end.host.empty() ? "" : " on " + end.host,
                         report.root_cause ? report.root_cause->message : std::string("?"));
    case Kind::Hung:
      return fmt::format("sgpu: error: the job hung: {}{} (exit code 124)", env::describe_end(end),
                         stopped_by_sgpu(report));
    case Kind::Preempted:
      return fmt::format("sgpu: {}{} (exit code {})", env::describe_end(end), stopped_by_sgpu(report),
                         report.exit_code);
    case Kind::NodeLost:
    case Kind::StoppedByScheduler:
    case Kind::NotStarted:
      return fmt::format("sgpu: error: {}{} (exit code {})", env::describe_end(end), stopped_by_sgpu(report),
                         report.exit_code);
  }
  return "sgpu: the job ended";
}

std::string format_rank_table(const RunReport& report, std::size_t max_rows) {
  std::vector<const RankReport*> rows;
  for (const auto& r : report.ranks) rows.push_back(&r);
  std::map<std::string, int> hidden;
  if (rows.size() > max_rows) {
    // The ranks a reader needs (root cause, failed, not ok) first, then by rank.
    auto weight = [&](const RankReport* r) {
      if (is_root_cause(report, *r)) return 0;
      auto v = rank_verdict_name(*r);
      return v == "failed" ? 1 : v == "ok" ? 3 : 2;
    };
    std::stable_sort(rows.begin(), rows.end(),
                     [&](const RankReport* a, const RankReport* b) { return weight(a) < weight(b); });
    for (std::size_t i = max_rows; i < rows.size(); ++i) ++hidden[verdict_text(report, *rows[i])];
    rows.resize(max_rows);
    std::sort(rows.begin(), rows.end(), [](const RankReport* a, const RankReport* b) { return a->rank < b->rank; });
  }
  const std::array<std::string, 6> head = {"rank", "host", "pid", "exit", "duration", "verdict"};
  std::vector<std::array<std::string, 6>> cells;
  for (const auto* r : rows) {
    auto took = r->status ? env::format_duration(env::Seconds(duration_seconds(r->started, r->ended))) : "-";
    cells.push_back({std::to_string(r->rank), r->host, r->pid > 0 ? std::to_string(r->pid) : "-", exit_text(r->status),
                     took, verdict_text(report, *r)});
  }
  std::array<std::size_t, 6> width{};
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::array<std::string, 6>& row) {
    // Numbers right-aligned, words left-aligned; no trailing blanks.
    return fmt::format("  {:>{}}  {:<{}}  {:>{}}  {:<{}}  {:>{}}  {}\n", row[0], width[0], row[1], width[1], row[2],
                       width[2], row[3], width[3], row[4], width[4], row[5]);
  };
  std::string out = line(head);
  for (const auto& row : cells) out += line(row);
  if (!hidden.empty()) {
    std::string parts;
    int total = 0;
    for (const auto& [verdict, n] : hidden) {
      parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", n, verdict);
      total += n;
    }
    out += fmt::format("  ... and {} more rank{}: {}\n", total, total == 1 ? "" : "s", parts);
  }
  return out;
}

std::string escape_controls(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    bool c1 = c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
              static_cast<unsigned char>(text[i + 1]) <= 0x9F;
    if (c1) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[++i]));
    } else if (c == '\n' || c == '\t') {
      out += keep_newlines ? std::string(1, static_cast<char>(c)) : (c == '\n' ? "\\n" : "\\t");
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string format_report(const RunReport& report) {
  std::string out;
  for (const auto& w : report.warnings) out += fmt::format("sgpu: warning: {}\n", w);
  std::string attempts;
  if (report.attempts.size() > 1)
    attempts = fmt::format("sgpu: {} attempts ({} restart{}); each attempt's files in {}/ranks/<rank>/attempt-<k>/\n",
                           report.attempts.size(), report.attempts.size() - 1, report.attempts.size() == 2 ? "" : "s",
                           report.run_dir);
  auto tracked = report.mlflow ? fmt::format("sgpu: mlflow run {}\n", report.mlflow->url) : std::string();
  if (report.end.kind == Kind::Completed) return out + headline(report) + "\n" + attempts + tracked;
  out += headline(report) + "\n" + attempts;
  if (report.end.kind == Kind::SpawnFailed && report.ranks.size() <= 1) return out + tracked;
  out += format_rank_table(report);
  if (const auto& cause = report.root_cause; cause && cause->kind == Kind::RankFailed) {
    // The message may hold the error file's text: shown escaped, as its traceback.
    out += fmt::format("sgpu: root cause: {}\n", escape_controls(cause->message, false));
    if (cause->source == "error_file") {
      out += fmt::format("  traceback ({}):\n", cause->source_path);
      out += indent(escape_controls(cause->details, true), "    ");
    } else if (!cause->details.empty()) {
      out += fmt::format("  last lines of its stderr ({}):\n", cause->source_path);
      out += indent(cause->details, "    ");
    } else {
      out += fmt::format("  it wrote nothing to stderr ({}) and left no error file\n", cause->source_path);
    }
  }
  out += fmt::format("sgpu: logs: {}/ranks/<rank>/{{stdout,stderr}}; summary: {}/summary.json\n", report.run_dir,
                     report.run_dir);
  return out + tracked;
}

}  // namespace sgpu::launcher
