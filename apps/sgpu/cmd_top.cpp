// `sgpu top [RUN]`: a running job at a glance, refreshed in place each
// second on a terminal (runs/top.hpp reads and renders it); keys sort and
// filter the ranks, q quits and the job runs on. Without a terminal, one
// snapshot. One Asio loop: the refresh timer, the keys on stdin, the signals.
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>
#include <algorithm>
#include <cstdlib>
#include <memory>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "commands.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/runs/registry.hpp"
#include "sgpu/launcher/runs/top.hpp"
#include "startup.hpp"

namespace sgpu::app {
namespace {
namespace asio = boost::asio;
using launcher::RunInfo;
using launcher::RunState;
using launcher::TopOptions;
using launcher::TopSort;

constexpr auto kRefresh = std::chrono::seconds(1);
constexpr int kSnapshotWidth = 160;

struct Size {
  int width = 0;
  int height = 0;
};

Size terminal_size(int fd) {
  winsize ws{};
  if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return {ws.ws_col, ws.ws_row};
  const char* columns = std::getenv("COLUMNS");
  return {columns != nullptr && std::atoi(columns) > 0 ? std::atoi(columns) : kSnapshotWidth, 0};
}

// The terminal in raw mode and the alternate screen for as long as it lives.
class Screen {
 public:
  Screen() {
    if (::tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 1;
      raw.c_cc[VTIME] = 0;
      restore_ = ::tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    write("\x1b[?1049h\x1b[?25l");
  }
  ~Screen() {
    write("\x1b[?25h\x1b[?1049l");
    if (restore_) ::tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  Screen(const Screen&) = delete;
  Screen& operator=(const Screen&) = delete;

  void draw(const std::vector<std::string>& lines) {
    std::string out = "\x1b[H";
    for (const auto& l : lines) out += l + "\x1b[K\r\n";
    out += "\x1b[J";
    write(out);
  }

  static void write(std::string_view s) {
    while (!s.empty()) {
      ssize_t n = ::write(STDOUT_FILENO, s.data(), s.size());
      if (n <= 0) return;
      s.remove_prefix(static_cast<std::size_t>(n));
    }
  }

 private:
  termios saved_{};
  bool restore_ = false;
};

RunInfo choose_run(const std::string& root, const std::string& query) {
  if (!query.empty()) return launcher::find_run(root, query);
  auto runs = launcher::list_runs(root);
  auto it = std::find_if(runs.begin(), runs.end(), [](const RunInfo& r) { return r.state == RunState::Running; });
  if (it == runs.end()) throw Error(fmt::format("no run is running in {}; name one: sgpu top RUN", root));
  return *it;
}

class Live {
 public:
  Live(std::string root, RunInfo run)
      : root_(std::move(root)), run_(std::move(run)), timer_(io_), keys_(io_), signals_(io_) {}

  int run() {
    keys_.assign(::dup(STDIN_FILENO));
    signals_.add(SIGINT);
    signals_.add(SIGTERM);
    signals_.add(SIGHUP);
    signals_.add(SIGWINCH);
    await_signal();
    await_key();
    {
      Screen screen;
      screen_ = &screen;
      refresh();
      io_.run();
      screen_ = nullptr;
    }
    // What the screen showed last stays on the terminal after it.
    if (ended_) launcher::output(text(kSnapshotWidth, 0));
    return 0;
  }

 private:
  std::string text(int width, int height) {
    std::string out;
    for (const auto& l : launcher::render_top(view_, options_, width, height)) out += l + "\n";
    return out;
  }

  void refresh() {
    try {
      run_ = launcher::find_run(root_, run_.id);
    } catch (const Error&) {  // removed meanwhile: show what was seen
      return stop(true);
    }
    view_ = launcher::read_top(run_);
    draw();
    if (run_.state != RunState::Running) return stop(true);
    timer_.expires_after(kRefresh);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) refresh();
    });
  }

  void draw() {
    if (screen_ == nullptr) return;
    auto size = terminal_size(STDOUT_FILENO);
    auto lines = launcher::render_top(view_, options_, size.width, size.height > 1 ? size.height - 1 : 0);
    if (editing_) lines.push_back(fmt::format("filter: {}_", draft_));
    screen_->draw(lines);
  }

  void stop(bool ended) {
    ended_ = ended;
    timer_.cancel();
    signals_.cancel();
    boost::system::error_code ignored;
    keys_.close(ignored);
  }

  void await_signal() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGWINCH) {
        draw();
        return await_signal();
      }
      stop(false);
    });
  }

  void await_key() {
    keys_.async_read_some(asio::buffer(buf_), [this](const boost::system::error_code& ec, std::size_t n) {
      if (ec) return;
      for (std::size_t i = 0; i < n; ++i)
        if (!key(buf_[i])) return stop(false);
      draw();
      await_key();
    });
  }

  // False: quit.
  bool key(char c) {
    if (editing_) {
      if (c == '\r' || c == '\n') {
        options_.filter = draft_;
        editing_ = false;
      } else if (c == 27) {
        editing_ = false;
      } else if (c == 127 || c == 8) {
        if (!draft_.empty()) draft_.pop_back();
      } else if (static_cast<unsigned char>(c) >= 0x20) {
        draft_ += c;
      }
      return true;
    }
    switch (c) {
      case 'q':
      case 'Q':
        return false;
      case 'r':
        options_.sort = TopSort::Rank;
        break;
      case 'c':
        options_.sort = TopSort::Cpu;
        break;
      case 'g':
        options_.sort = TopSort::Gpu;
        break;
      case 's':
        options_.sort = TopSort::Rate;
        break;
      case 'm':
        options_.sort = TopSort::Memory;
        break;
      case 'o':
        options_.sort = TopSort::Output;
        break;
      case 'x':
        options_.stragglers_only = !options_.stragglers_only;
        break;
      case '/':
        editing_ = true;
        draft_.clear();
        break;
      case 27:  // esc
        options_.filter.clear();
        break;
      default:
        break;
    }
    return true;
  }

  asio::io_context io_;
  std::string root_;
  RunInfo run_;
  launcher::TopView view_;
  TopOptions options_;
  asio::steady_timer timer_;
  asio::posix::stream_descriptor keys_;
  asio::signal_set signals_;
  Screen* screen_ = nullptr;
  std::array<char, 64> buf_{};
  bool editing_ = false;
  std::string draft_;
  bool ended_ = false;
};

}  // namespace

Command add_top(CLI::App& app) {
  struct Flags {
    std::string run;
    std::string log_dir;
  };
  auto f = std::make_shared<Flags>();
  auto* cmd = app.add_subcommand(
      "top",
      "A running job live, one row per rank: its node, GPU use, CPU, memory, step rate, time since its last output "
      "and last line, stragglers marked; keys sort (r c g s m o) and filter (/, x) the ranks, q quits and the job "
      "runs on. Without a terminal, one snapshot");
  cmd->add_option("RUN", f->run,
                  "a run name, a run id, a unique prefix of one, or 'last' (default: the newest running run)");
  cmd->add_option("--log-dir", f->log_dir, "the runs directory (default $SGPU_HOME/runs, as for launch --log-dir)")
      ->check(non_empty_path());
  return [f](const DashTail&) {
    auto root = launcher::runs_root(f->log_dir, env::current_environment());
    auto run = choose_run(root, f->run);
    if (::isatty(STDOUT_FILENO) == 1 && ::isatty(STDIN_FILENO) == 1 && run.state == RunState::Running)
      return Live(root, run).run();
    std::string out;
    auto size = terminal_size(STDOUT_FILENO);
    for (const auto& l : launcher::render_top(launcher::read_top(run), {}, size.width, 0)) out += l + "\n";
    launcher::output(out);
    return 0;
  };
}

}  // namespace sgpu::app
