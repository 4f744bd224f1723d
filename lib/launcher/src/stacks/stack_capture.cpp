#include <unistd.h>
#include <algorithm>
#include <charconv>
#include <ctime>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/process/command.hpp"
#include "sgpu/launcher/stacks/stacks.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {
constexpr std::size_t kMaxToolOutput = 4 << 20;  // one rank's stacks; a runaway is cut here

bool executable(const fs::path& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p); }

std::optional<std::string> on_path(const std::string& name, const env::Environment& environment) {
  auto found = find_on_path(name, environment);
  if (found.empty()) return std::nullopt;
  return found;
}

// The first "Error: ..." line of a tool's stderr (py-spy adds a backtrace).
std::string first_error_line(const std::string& err) {
  std::string_view text(err);
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (!line.empty()) return std::string(line.substr(0, 300));
    if (nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return "no message";
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != std::string_view::npos; }

std::string explain_failure(const CommandResult& r, const std::string& tool, std::chrono::milliseconds limit) {
  if (!r.start_error.empty()) return r.start_error;
  if (r.timed_out)
    return fmt::format("{} did not answer within {} ms (the process may be in uninterruptible sleep, D state)", tool,
                       limit.count());
  auto line = first_error_line(r.err);
  if (contains(line, "os error 2") || contains(r.err, "os error 2") || contains(r.err, "No such process") ||
      contains(r.err, "Check that the process is running"))
    return "the rank exited while its stack was taken";
  if (contains(r.err, "os error 1)") || contains(r.err, "os error 13") || contains(r.err, "Operation not permitted") ||
      contains(r.err, "Permission denied"))
    return fmt::format(
        "{} may not trace it ({}): /proc/sys/kernel/yama/ptrace_scope above 1, or a container "
        "without CAP_SYS_PTRACE",
        tool, line);
  return fmt::format("{}: {}", tool, line);
}

struct Gather {
  std::vector<RankStack> stacks;
  std::size_t left = 0;
  std::function<void(std::vector<RankStack>)> done;
  void one_done() {
    if (--left == 0) done(std::move(stacks));
  }
};

void read_native(boost::asio::io_context& io, const std::shared_ptr<Gather>& g, std::size_t i,
                 const StackOptions& options, const std::string& python_error) {
  auto eu_stack = on_path("eu-stack", options.environment);
  auto& s = g->stacks[i];
  if (!eu_stack) {
    s.error = fmt::format(
        "not a Python process ({}), and eu-stack is not installed for its native stack "
        "(Debian: apt-get install elfutils)",
        python_error);
    g->one_done();
    return;
  }
  s.tool = "eu-stack";
  run_command(io, {*eu_stack, "-p", std::to_string(s.pid)}, options.environment, options.limit, kMaxToolOutput,
              [g, i, limit = options.limit](CommandResult r) {
                auto& st = g->stacks[i];
                if (!r.out.empty() && !r.timed_out) st.threads = parse_eu_stack(r.out, st.pid);
                if (st.threads.empty()) st.error = explain_failure(r, "eu-stack", limit);
                g->one_done();
              });
}
}  // namespace

StackOptions stack_options_for(const std::string& program, const env::Environment& environment) {
  StackOptions options;
  options.environment = environment;
  options.look_beside.push_back(program);
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) options.look_beside.push_back(self.string());
  return options;
}

std::optional<std::string> find_py_spy(const StackOptions& options) {
  auto set = options.environment.find("SGPU_PY_SPY");
  if (set != options.environment.end() && !set->second.empty()) return set->second;
  for (const auto& program : options.look_beside) {
    if (program.empty()) continue;
    auto beside = fs::path(program).parent_path() / "py-spy";
    if (executable(beside)) return beside.string();
  }
  return on_path("py-spy", options.environment);
}

std::string py_spy_missing_message(const StackOptions& options) {
  std::string places;
  for (const auto& p : options.look_beside)
    if (!p.empty()) places += fmt::format(", beside {}", p);
  return fmt::format(
      "py-spy not found ($SGPU_PY_SPY{}, PATH): pip install py-spy into the job's environment, or set "
      "SGPU_PY_SPY to its path",
      places);
}

std::vector<ThreadStack> parse_py_spy_json(std::string_view text, int pid) {
  std::vector<ThreadStack> threads;
  try {
    auto doc = json::parse(text);
    for (const auto& t : doc) {
      ThreadStack th;
      if (t.contains("thread_name") && t["thread_name"].is_string()) th.name = t["thread_name"].get<std::string>();
      if (t.contains("os_thread_id") && t["os_thread_id"].is_number_integer())
        th.tid = t["os_thread_id"].get<long long>();
      else if (t.contains("thread_id") && t["thread_id"].is_number_integer())
        th.tid = t["thread_id"].get<long long>();
      th.main = th.tid == pid || th.name == "MainThread";
      for (const auto& f : t.at("frames")) {
        StackFrame frame;
        frame.name = f.value("name", std::string("?"));
        if (f.contains("short_filename") && f["short_filename"].is_string())
          frame.file = f["short_filename"].get<std::string>();
        if (f.contains("filename") && f["filename"].is_string()) frame.path = f["filename"].get<std::string>();
        if (f.contains("line") && f["line"].is_number_integer()) frame.line = f["line"].get<int>();
        th.frames.push_back(std::move(frame));
      }
      threads.push_back(std::move(th));
    }
  } catch (const json::exception& e) {
    throw Error(fmt::format("py-spy's output is not its JSON: {}", e.what()));
  }
  return threads;
}

std::vector<ThreadStack> parse_eu_stack(std::string_view text, int pid) {
  std::vector<ThreadStack> threads;
  while (!text.empty()) {
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.rfind("TID ", 0) == 0) {
      ThreadStack th;
      auto digits = line.substr(4);
      std::from_chars(digits.data(), digits.data() + digits.size(), th.tid);
      th.main = th.tid == pid;
      threads.push_back(std::move(th));
    } else if (line.rfind("#", 0) == 0 && !threads.empty()) {
      // "#0  0x00007f3a5c8e4e8a __nanosleep": the third field, when there is one.
      auto addr = line.find("0x");
      if (addr == std::string_view::npos) continue;
      auto space = line.find(' ', addr);
      std::string name = "??";
      if (space != std::string_view::npos) {
        auto rest = line.substr(space);
        auto start = rest.find_first_not_of(' ');
        if (start != std::string_view::npos) name = std::string(rest.substr(start));
      }
      threads.back().frames.push_back({name, "", "", 0});
    }
  }
  return threads;
}

void take_stacks(boost::asio::io_context& io, const std::vector<StackTarget>& targets, const StackOptions& options,
                 std::function<void(std::vector<RankStack>)> done) {
  auto g = std::make_shared<Gather>();
  g->done = std::move(done);
  g->left = targets.size();
  for (const auto& t : targets) g->stacks.push_back({t.rank, t.host, t.pid, "", {}, ""});
  if (targets.empty()) {
    g->done({});
    return;
  }
  auto py_spy = find_py_spy(options);
  auto environment = options.environment;
  environment["RUST_BACKTRACE"] = "0";
  for (std::size_t i = 0; i < targets.size(); ++i) {
    auto& s = g->stacks[i];
    if (!py_spy) {
      s.error = py_spy_missing_message(options);
      g->one_done();
      continue;
    }
    s.tool = "py-spy";
    std::vector<std::string> argv{*py_spy, "dump", "--pid", std::to_string(s.pid), "--json"};
    if (options.native) argv.emplace_back("--native");
    StackOptions native_options = options;
    native_options.environment = environment;
    run_command(io, argv, environment, options.limit, kMaxToolOutput, [&io, g, i, native_options](CommandResult r) {
      auto& st = g->stacks[i];
      if (r.ok()) {
        try {
          st.threads = parse_py_spy_json(r.out, st.pid);
        } catch (const Error& e) {
          st.error = e.what();
        }
        g->one_done();
        return;
      }
      if (contains(r.err, "Failed to find python version") || contains(r.err, "Failed to find a python interpreter")) {
        read_native(io, g, i, native_options, "py-spy found no Python interpreter in it");
        return;
      }
      st.error = explain_failure(r, "py-spy", native_options.limit);
      g->one_done();
    });
  }
}

std::string format_inspection(const std::string& headline, const Inspection& in) {
  std::string tools;
  for (const auto& s : in.stacks)
    if (!s.tool.empty() && tools.find(s.tool) == std::string::npos) tools += (tools.empty() ? "" : ", ") + s.tool;
  return fmt::format("sgpu: {}{}the stacks of {} rank{} ({}{:.2f} s){}:\n{}", headline, headline.empty() ? "" : "; ",
                     in.stacks.size(), in.stacks.size() == 1 ? "" : "s", tools.empty() ? "" : tools + ", ", in.seconds,
                     in.dir.empty() ? "" : ", kept in " + in.dir, format_stack_report(in.report, in.stacks));
}

void inspect_ranks(boost::asio::io_context& io, const std::string& run_dir, const std::string& headline,
                   const std::vector<StackTarget>& targets, const StackOptions& options,
                   std::function<void(Inspection)> done) {
  auto began = std::chrono::steady_clock::now();
  take_stacks(io, targets, options, [run_dir, headline, began, done = std::move(done)](std::vector<RankStack> stacks) {
    auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    done(present_stacks(run_dir, headline, std::move(stacks), seconds));
  });
}

Inspection present_stacks(const std::string& run_dir, const std::string& headline, std::vector<RankStack> stacks,
                          double seconds) {
  Inspection in;
  in.seconds = seconds;
  std::sort(stacks.begin(), stacks.end(), [](const RankStack& a, const RankStack& b) { return a.rank < b.rank; });
  in.report = analyse_stacks(stacks);
  in.stacks = std::move(stacks);
  try {
    if (!run_dir.empty()) in.dir = write_stacks(run_dir, std::chrono::system_clock::now(), in.report, in.stacks);
  } catch (const Error& e) {
    diagnostic("sgpu: warning: the stacks are not kept: {}\n", e.what());
  }
  if (!headline.empty()) diagnostic(format_inspection(headline, in));
  return in;
}

std::string write_stacks(const std::string& run_dir, std::chrono::system_clock::time_point taken,
                         const StackReport& report, const std::vector<RankStack>& stacks) {
  auto t = std::chrono::system_clock::to_time_t(taken);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(taken.time_since_epoch()).count() % 1000;
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
  auto dir = fs::path(run_dir) / "stacks" / fmt::format("{}.{:03d}", stamp, ms);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  write_file_atomic((dir / "report.txt").string(), format_stack_report(report, stacks));
  write_file_atomic((dir / "stacks.json").string(), stacks_json(report, stacks).dump(1) + "\n");
  for (const auto& s : stacks)
    write_file_atomic((dir / fmt::format("rank-{}.txt", s.rank)).string(), format_rank_stack(s));
  return dir.string();
}

}  // namespace sgpu::launcher
