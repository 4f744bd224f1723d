#include "sgpu/launcher/runs/follow.hpp"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/fd.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/io/run_files.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;
namespace asio = boost::asio;

namespace {
constexpr std::size_t kTailWindow = 8 << 20;  // how far back --tail looks
constexpr std::size_t kReadChunk = 1 << 20;

RunInfo reread(const RunInfo& run) {
  auto again = read_run(fs::path(run.dir).parent_path().string(), run.id);
  return again ? *again : run;
}

// A pidfd of the run's supervisor, or none when it is not running. Opened
// before the lock is checked: if the lock is still held afterwards, the
// supervisor was alive all along, so the pid was its own.
Fd supervisor_pidfd(const RunInfo& run) {
  if (run.state != RunState::Running) return Fd();
  int pid = run.record.value("sgpu_pid", 0);
  if (pid <= 0) return Fd();
  Fd fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (fd.get() < 0) return Fd();
  if (!run_lock_held(run.dir)) return Fd();
  return fd;
}

// Runs `io` until the pidfd says the supervisor exited or `timeout` passes.
bool wait_exit(asio::io_context& io, Fd& pidfd, std::optional<std::chrono::milliseconds> timeout) {
  asio::posix::stream_descriptor exit_watch(io, pidfd.release());
  asio::steady_timer timer(io);
  bool ended = false;
  exit_watch.async_wait(asio::posix::stream_descriptor::wait_read, [&](const boost::system::error_code& ec) {
    if (ec) return;
    ended = true;
    io.stop();
  });
  if (timeout) {
    timer.expires_after(*timeout);
    timer.async_wait([&](const boost::system::error_code& ec) {
      if (!ec) io.stop();
    });
  }
  io.run();
  return ended;
}

// One rank's log file, read from where the last read stopped; whole lines
// are printed with the rank's prefix, a partial one waits for its end.
struct Source {
  int rank = 0;
  Stream stream = Stream::Out;
  std::string path;
  std::string label;
  Fd fd;
  off_t offset = 0;
  std::string partial;
};

class LogPrinter {
 public:
  LogPrinter(const RunInfo& run, const LogOptions& o) : options_(o) {
    int world = run.world_size;
    std::vector<int> ranks = o.ranks;
    if (ranks.empty())
      for (int r = 0; r < world; ++r) ranks.push_back(r);
    auto hosts = rank_hosts(run);
    bool multi = run.record.value("nnodes", 1) > 1;
    for (int r : ranks) {
      if (r < 0 || r >= world)
        throw Error(
            fmt::format("--rank {}: run {} has {} rank{} (0-{})", r, run.id, world, world == 1 ? "" : "s", world - 1));
      std::string label = multi && hosts.count(r) ? fmt::format("{}:{}", hosts[r], r) : std::to_string(r);
      for (auto stream : {Stream::Out, Stream::Err}) {
        if (o.stderr_only && stream == Stream::Out) continue;
        auto& s = sources_.emplace_back();
        s.rank = r;
        s.stream = stream;
        s.path = rank_log_path(run.dir, r, stream);
        s.label = label;
      }
    }
  }

  // Prints what was appended since the last call; `last` ends a partial final line.
  void pump(bool last) {
    for (auto& s : sources_) read_source(s, last);
    flush();
  }

 private:
  static std::map<int, std::string> rank_hosts(const RunInfo& run) {
    std::map<int, std::string> hosts;
    auto table = rank_table(run);
    for (const auto& row : table)
      if (!row.value("host", "").empty()) hosts[row.value("rank", -1)] = row.value("host", "");
    return hosts;
  }

  void read_source(Source& s, bool last) {
    if (s.fd.get() < 0) {
      s.fd = Fd(::open(s.path.c_str(), O_RDONLY | O_CLOEXEC));
      if (s.fd.get() < 0) return;  // the rank wrote nothing yet
      if (options_.tail) start_at_tail(s);
    }
    std::string chunk(kReadChunk, '\0');
    for (;;) {
      ssize_t n = ::pread(s.fd.get(), chunk.data(), chunk.size(), s.offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      s.offset += n;
      emit(s, std::string_view(chunk.data(), static_cast<std::size_t>(n)));
    }
    if (last && !s.partial.empty()) {
      print_line(s, s.partial);
      s.partial.clear();
    }
  }

  void start_at_tail(Source& s) {
    struct stat st {};
    if (::fstat(s.fd.get(), &st) != 0) return;
    auto size = static_cast<std::size_t>(st.st_size);
    auto from = size > kTailWindow ? size - kTailWindow : 0;
    std::string data(size - from, '\0');
    std::size_t got = 0;
    while (got < data.size()) {
      ssize_t n = ::pread(s.fd.get(), data.data() + got, data.size() - got, static_cast<off_t>(from + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    data.resize(got);
    s.offset = static_cast<off_t>(from + got);
    // The last N lines, a partial last one counting as one; a window that
    // starts mid-file drops its first, cut line.
    std::vector<std::string_view> lines;
    std::string_view rest(data);
    while (!rest.empty()) {
      auto nl = rest.find('\n');
      lines.push_back(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
    bool partial_last = !data.empty() && data.back() != '\n';
    // A window that starts mid-file begins with a cut line: left out, unless
    // the lines wanted reach back to it (one line longer than the window):
    // then its end is shown, and said to be cut.
    bool cut = from > 0 && !lines.empty();
    std::size_t first = cut ? 1 : 0;
    if (lines.size() - first > *options_.tail) {
      first = lines.size() - *options_.tail;
    } else if (cut && *options_.tail > 0 && lines.size() - 1 < *options_.tail) {
      first = 0;
      diagnostic("sgpu: warning: rank {} {}: a line longer than {} MiB was cut to its last {} MiB\n", s.rank,
                 s.stream == Stream::Out ? "stdout" : "stderr", kTailWindow >> 20, kTailWindow >> 20);
    }
    for (std::size_t i = first; i < lines.size(); ++i) {
      if (partial_last && i + 1 == lines.size())
        s.partial = std::string(lines[i]);
      else
        print_line(s, lines[i]);
    }
  }

  void emit(Source& s, std::string_view bytes) {
    std::size_t start = 0;
    while (start < bytes.size()) {
      auto nl = bytes.find('\n', start);
      if (nl == std::string_view::npos) {
        s.partial.append(bytes.substr(start));
        return;
      }
      if (s.partial.empty()) {
        print_line(s, bytes.substr(start, nl - start));
      } else {
        s.partial.append(bytes.substr(start, nl - start));
        print_line(s, s.partial);
        s.partial.clear();
      }
      start = nl + 1;
    }
  }

  void print_line(const Source& s, std::string_view line) {
    if (options_.json) {
      nlohmann::ordered_json doc = {
          {"rank", s.rank}, {"stream", s.stream == Stream::Out ? "stdout" : "stderr"}, {"line", std::string(line)}};
      to(1) += doc.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
      pending_ += '\n';
    } else {
      auto& out = to(s.stream == Stream::Out && !options_.stdout_to_stderr ? 1 : 2);
      out += '[';
      out += s.label;
      out += "] ";
      out += line;
      out += '\n';
    }
    if (pending_.size() >= kReadChunk) flush();
  }

  // Lines are written a chunk at a time, in the order they were read: a
  // line for the other stream writes what is pending first.
  std::string& to(int fd) {
    if (fd != pending_fd_) flush();
    pending_fd_ = fd;
    return pending_;
  }

  void flush() {
    if (!pending_.empty()) output(pending_, pending_fd_);
    pending_.clear();
  }

  LogOptions options_;
  std::vector<Source> sources_;
  std::string pending_;  // lines not written yet, all for pending_fd_
  int pending_fd_ = 1;
};

// inotify on the run directory, ranks/ and each ranks/<r>/: a new file or
// new bytes in one wake the follower, which then reads every source.
class RunDirWatch {
 public:
  RunDirWatch(asio::io_context& io, const std::string& run_dir) : run_dir_(run_dir), stream_(io) {
    int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) throw Error(fmt::format("inotify: {}", std::strerror(errno)), 1);
    stream_.assign(fd);
    add(run_dir_ + "/ranks", -1);
    add_rank_dirs();
  }

  // Calls `changed` after each batch of events until the loop stops.
  void watch(std::function<void()> changed) {
    changed_ = std::move(changed);
    arm();
  }

 private:
  void add(const std::string& path, int rank) {
    int wd = ::inotify_add_watch(stream_.native_handle(), path.c_str(),
                                 IN_CREATE | IN_MODIFY | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ONLYDIR);
    if (wd >= 0) watched_[wd] = rank;
  }

  void add_rank_dirs() {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(run_dir_ + "/ranks", ec)) {
      auto name = entry.path().filename().string();
      if (!seen_.insert(name).second) continue;
      add(entry.path().string(), 0);
    }
  }

  void arm() {
    stream_.async_read_some(asio::buffer(buffer_), [this](const boost::system::error_code& ec, std::size_t) {
      if (ec) return;
      add_rank_dirs();  // a rank's directory may just have appeared (multi-node runs fill ranks/ late)
      changed_();
      arm();
    });
  }

  std::string run_dir_;
  asio::posix::stream_descriptor stream_;
  std::array<char, 16 << 10> buffer_{};
  std::map<int, int> watched_;
  std::set<std::string> seen_;
  std::function<void()> changed_;
};

}  // namespace

int run_exit_code(const RunInfo& run) {
  if (run.state == RunState::Lost || !run.exit_code) return 1;
  return *run.exit_code;
}

int print_logs(const RunInfo& run, const LogOptions& options) {
  LogPrinter printer(run, options);
  if (!options.follow) {
    printer.pump(true);
    return 0;
  }
  auto pidfd = supervisor_pidfd(run);
  if (pidfd.get() < 0) {
    printer.pump(true);
    return run_exit_code(reread(run));
  }
  asio::io_context io(1);
  RunDirWatch dir(io, run.dir);  // watching before the first read: nothing falls in between
  // A reader that went away (`sgpu logs -f RUN | head`) ends the following:
  // nothing more can be shown.
  auto output_lost = [] { return stream_failures().output_errno != 0; };
  dir.watch([&] {
    printer.pump(false);
    if (output_lost()) io.stop();
  });
  printer.pump(false);
  if (!output_lost()) wait_exit(io, pidfd, std::nullopt);
  if (output_lost()) return 1;
  printer.pump(true);  // the supervisor wrote everything before it exited
  return run_exit_code(reread(run));
}

std::optional<RunInfo> wait_for_run(const RunInfo& run, std::optional<std::chrono::milliseconds> timeout) {
  auto pidfd = supervisor_pidfd(run);
  if (pidfd.get() < 0) return reread(run);
  asio::io_context io(1);
  if (!wait_exit(io, pidfd, timeout)) return std::nullopt;
  return reread(run);
}

RunInfo cancel_run(const RunInfo& run) {
  auto pidfd = supervisor_pidfd(run);
  if (pidfd.get() < 0) return reread(run);
  // Only the cancel that creates the marker signals: a second SIGTERM would
  // make the supervisor kill at once instead of granting the grace.
  auto marker = run.dir + "/" + kRunCancelFile;
  Fd created(::open(marker.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (created.get() >= 0 && ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGTERM, nullptr, 0) != 0 && errno != ESRCH)
    throw Error(fmt::format("cannot signal run {} (sgpu pid {}): {}", run.id, run.record.value("sgpu_pid", 0),
                            std::strerror(errno)),
                1);
  asio::io_context io(1);
  wait_exit(io, pidfd, std::nullopt);
  return reread(run);
}

}  // namespace sgpu::launcher
