#include "backends/ssh/ssh_nodes.hpp"

#include <array>
#include <csignal>
#include <deque>
#include <optional>
#include <system_error>

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "backends/ssh/ssh_scripts.hpp"
#include "sgpu/launcher/process/child_process.hpp"

namespace sgpu::launcher {
namespace asio = boost::asio;

namespace {
constexpr std::size_t kTailLines = 20;

// stdin a pipe (secrets, then held open) or a file (a tarball, a binary);
// stdout and stderr on pipes.
ChildOptions ssh_options(const SshStep& step) {
  ChildOptions options;
  options.argv = step.argv;
  options.in = step.stdin_file.empty() ? ChildStream::pipe() : ChildStream::path(step.stdin_file);
  options.out = ChildStream::pipe();
  options.err = ChildStream::pipe();
  return options;
}
}  // namespace

struct SshNodes::Impl {
  struct Node {
    SshNode spec;
    std::size_t step = 0;
    std::chrono::steady_clock::time_point step_started{};
    // ssh in its own process group: the terminal's Ctrl-C reaches sgpu, which
    // stops remote nodes through the rendezvous, not by cutting their
    // connections; signal_group reaches what ssh started (a ProxyCommand,
    // which ssh killed before it connects leaves running), not a
    // ControlPersist master (it starts its own session).
    std::unique_ptr<ChildProcess> proc;
    std::optional<asio::steady_timer> deadline;  // a closed session's ssh gets SIGTERM when it expires
    std::array<char, 4096> out_buf{};
    std::array<char, 4096> err_buf{};
    std::string out_text, err_line;
    std::deque<std::string> tail;
    std::optional<int> wait_status;
    int open_pipes = 0;
    bool ready = false;
    bool in_flight = false;
    bool reported = false;
  };

  asio::io_context& io;
  std::deque<Node> nodes;  // a deque: add() keeps every Node where its handlers find it
  int max_parallel;
  SshNodesHandler& handler;
  std::size_t next = 0;  // the next node to start
  int in_flight = 0;
  bool stopped = false;
  std::size_t reported = 0;

  Impl(asio::io_context& io_, std::vector<SshNode> specs, int cap, SshNodesHandler& h)
      : io(io_), max_parallel(cap < 1 ? 1 : cap), handler(h) {
    nodes.resize(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) nodes[i].spec = std::move(specs[i]);
  }

  void fill() {
    while (!stopped && next < nodes.size() && in_flight < max_parallel) {
      auto& n = nodes[next];
      if (n.reported) {  // ended before it started (end_one)
        ++next;
        continue;
      }
      n.in_flight = true;
      ++in_flight;
      run_step(static_cast<int>(next++));
    }
  }

  void end_session(Node& n, std::chrono::steady_clock::duration wait);

  void leave_flight(Node& n) {
    if (!n.in_flight) return;
    n.in_flight = false;
    --in_flight;
    fill();
  }

  void keep_line(Node& n, int index, std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (n.ready && n.step + 1 == n.spec.steps.size()) handler.on_agent_line(index, line);
    n.tail.push_back(std::move(line));
    if (n.tail.size() > kTailLines) n.tail.pop_front();
  }

  void run_step(int index) {
    auto& n = nodes[static_cast<std::size_t>(index)];
    const auto& step = n.spec.steps[n.step];
    n.wait_status.reset();
    n.out_text.clear();
    n.step_started = std::chrono::steady_clock::now();
    try {
      n.proc = std::make_unique<ChildProcess>(io, ssh_options(step));
    } catch (const std::system_error& e) {
      n.tail.push_back(std::string("cannot start ") + e.what());
      n.wait_status = 127 << 8;
      n.open_pipes = 0;
      asio::post(io, [this, index] { maybe_done(index); });
      return;
    }
    n.open_pipes = 2;
    if (step.stdin_file.empty() && !step.stdin_text.empty()) {
      // The pipe stays open after the text: the agent may take its end as the launcher's.
      asio::async_write(n.proc->in(), asio::buffer(step.stdin_text), [](std::error_code, std::size_t) {});
    }
    read_out(index);
    read_err(index);
    n.proc->async_wait([this, index](int status) {
      auto& node = nodes[static_cast<std::size_t>(index)];
      node.wait_status = status;
      if (node.deadline) node.deadline->cancel();
      maybe_done(index);
    });
  }

  void read_out(int index) {
    auto& n = nodes[static_cast<std::size_t>(index)];
    n.proc->out().async_read_some(asio::buffer(n.out_buf), [this, index](std::error_code ec, std::size_t len) {
      auto& node = nodes[static_cast<std::size_t>(index)];
      if (ec) {
        if (!node.out_text.empty()) keep_line(node, index, std::exchange(node.out_text, {}));
        --node.open_pipes;
        return maybe_done(index);
      }
      node.out_text.append(node.out_buf.data(), len);
      for (auto nl = node.out_text.find('\n'); nl != std::string::npos; nl = node.out_text.find('\n')) {
        auto line = node.out_text.substr(0, nl);
        node.out_text.erase(0, nl + 1);
        bool last = node.step + 1 == node.spec.steps.size();
        if (last && !node.ready && line == ssh::kReadyMarker) {
          node.ready = true;
          handler.on_agent_ready(index);
          leave_flight(node);
        } else {
          keep_line(node, index, std::move(line));
        }
      }
      read_out(index);
    });
  }

  void read_err(int index) {
    auto& n = nodes[static_cast<std::size_t>(index)];
    n.proc->err().async_read_some(asio::buffer(n.err_buf), [this, index](std::error_code ec, std::size_t len) {
      auto& node = nodes[static_cast<std::size_t>(index)];
      if (ec) {
        if (!node.err_line.empty()) keep_line(node, index, std::exchange(node.err_line, {}));
        --node.open_pipes;
        return maybe_done(index);
      }
      node.err_line.append(node.err_buf.data(), len);
      for (auto nl = node.err_line.find('\n'); nl != std::string::npos; nl = node.err_line.find('\n')) {
        keep_line(node, index, node.err_line.substr(0, nl));
        node.err_line.erase(0, nl + 1);
      }
      read_err(index);
    });
  }

  // A step is over once ssh exited and both pipes reached their end, so the
  // tail holds everything it said.
  void maybe_done(int index) {
    auto& n = nodes[static_cast<std::size_t>(index)];
    if (!n.wait_status || n.open_pipes > 0 || n.reported) return;
    auto status = env::ExitStatus::from_wait_status(*n.wait_status);
    bool last = n.step + 1 == n.spec.steps.size();
    if (status.success() && !last && !stopped) {
      std::vector<std::string> said(n.tail.begin(), n.tail.end());
      handler.on_step_done(index, n.spec.steps[n.step].what, said,
                           std::chrono::duration<double>(std::chrono::steady_clock::now() - n.step_started).count());
      ++n.step;
      return run_step(index);
    }
    n.reported = true;
    ++reported;
    SshNodeExit exit{n.spec.steps[n.step].what, last, n.ready, status, {}};
    for (const auto& line : n.tail) exit.stderr_tail += line + "\n";
    leave_flight(n);
    handler.on_node_exit(index, exit);
  }
};

SshNodes::SshNodes(asio::io_context& io, std::vector<SshNode> nodes, int max_parallel, SshNodesHandler& handler)
    : impl_(std::make_unique<Impl>(io, std::move(nodes), max_parallel, handler)) {}

SshNodes::~SshNodes() = default;

void SshNodes::start() { impl_->fill(); }

void SshNodes::stop_starting() {
  for (; impl_->next < impl_->nodes.size(); ++impl_->next) {
    impl_->nodes[impl_->next].reported = true;
    ++impl_->reported;
  }
}

int SshNodes::add(SshNode node) {
  auto& s = *impl_;
  if (s.stopped) return -1;
  s.nodes.emplace_back().spec = std::move(node);
  auto index = static_cast<int>(s.nodes.size() - 1);
  s.fill();  // at once unless max_parallel sessions are still connecting
  return index;
}

void SshNodes::end_one(int index, std::chrono::steady_clock::duration wait) {
  auto& s = *impl_;
  auto k = static_cast<std::size_t>(index);
  if (k >= s.nodes.size()) return;
  if (k >= s.next) {  // not started yet: it never will be
    auto& n = s.nodes[k];
    if (!n.reported) {
      n.reported = true;
      ++s.reported;
    }
    return;
  }
  s.end_session(s.nodes[k], wait);
}

void SshNodes::end(std::chrono::steady_clock::duration wait) {
  auto& s = *impl_;
  s.stopped = true;
  stop_starting();
  for (auto& n : s.nodes) s.end_session(n, wait);
}

void SshNodes::Impl::end_session(Node& n, std::chrono::steady_clock::duration wait) {
  if (!n.proc || n.wait_status) return;
  if (!n.ready) {  // set by the last step's marker only
    // No agent yet: nothing on the host to wait for. The group, since ssh
    // dies of SIGTERM before it connects without stopping its ProxyCommand.
    // (A master that ControlPersist forked from this ssh keeps using that
    // proxy; it loses its connection, and the next run makes a new one.)
    n.proc->signal_group(SIGTERM);
    return;
  }
  // ssh passes the end of its input on; the agent stops its ranks and
  // exits, the bootstrap shell with it, and then ssh.
  boost::system::error_code ignored;
  n.proc->in().close(ignored);
  n.deadline.emplace(io, wait);
  n.deadline->async_wait([&n](boost::system::error_code ec) {
    if (!ec && !n.wait_status) n.proc->signal_group(SIGTERM);
  });
}

bool SshNodes::all_exited() const { return impl_->reported == impl_->nodes.size(); }

}  // namespace sgpu::launcher
