#include "backends/slurm/slurm_step.hpp"

#include "process/child_exec.hpp"

#include <sys/prctl.h>
#include <unistd.h>
#include <array>
#include <csignal>
#include <optional>

#include <fmt/format.h>
#include <boost/asio/readable_pipe.hpp>
#include <boost/process/v2/environment.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/start_dir.hpp>
#include <boost/process/v2/stdio.hpp>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace bp = boost::process::v2;

namespace {

bp::filesystem::path find_slurm_program(const std::string& name, const env::Environment& environment) {
  auto exe = bp::environment::find_executable(name, environment);
  if (exe.empty())
    throw Error(fmt::format("--backend slurm: '{}' not found on PATH; is this a SLURM node?", name), 127);
  return exe;
}

// Splits a pipe into lines; `on_end` once it is closed.
class LineReader {
 public:
  LineReader(boost::asio::io_context& io, std::function<void(const std::string&)> on_line, std::function<void()> on_end)
      : pipe_(io), on_line_(std::move(on_line)), on_end_(std::move(on_end)) {}
  boost::asio::readable_pipe& pipe() { return pipe_; }
  void start() {
    pipe_.async_read_some(boost::asio::buffer(buffer_), [this](boost::system::error_code ec, std::size_t n) {
      partial_.append(buffer_.data(), n);
      std::size_t from = 0;
      for (auto nl = partial_.find('\n', from); nl != std::string::npos; nl = partial_.find('\n', from)) {
        on_line_(partial_.substr(from, nl - from));
        from = nl + 1;
      }
      partial_.erase(0, from);
      if (!ec) return start();
      if (!partial_.empty()) on_line_(std::exchange(partial_, {}));
      on_end_();
    });
  }

 private:
  boost::asio::readable_pipe pipe_;
  std::function<void(const std::string&)> on_line_;
  std::function<void()> on_end_;
  std::array<char, 8192> buffer_{};
  std::string partial_;
};

}  // namespace

struct AgentStepProcess::Impl {
  Impl(boost::asio::io_context& io, Events ev)
      : events(std::move(ev)),
        out(
            io, [this](const std::string& l) { on_line(l); }, [this] { closed(); }),
        err(
            io, [this](const std::string& l) { on_line(l); }, [this] { closed(); }) {}

  void on_line(const std::string& line) {
    if (events.line) events.line(slurm::parse_srun_line(line), line);
  }
  void closed() {
    ++pipes_closed;
    maybe_exited();
  }
  void maybe_exited() {
    if (reported || pipes_closed < 2 || !wait_status) return;
    reported = true;
    if (events.exited) events.exited(*wait_status);
  }

  Events events;
  LineReader out;
  LineReader err;
  std::optional<bp::process> proc;
  std::optional<int> wait_status;
  int pipes_closed = 0;
  bool reported = false;
};

AgentStepProcess::AgentStepProcess(boost::asio::io_context& io, const std::vector<std::string>& argv,
                                   const env::Environment& environment, const std::string& cwd, Events events)
    : impl_(std::make_unique<Impl>(io, std::move(events))) {
  auto exe = find_slurm_program(argv.at(0), environment);
  std::vector<std::string> args(argv.begin() + 1, argv.end());
  bp::error_code ec;
  bp::default_process_launcher launcher;
  auto proc =
      launcher(io.get_executor(), ec, exe, args, bp::process_stdio{nullptr, impl_->out.pipe(), impl_->err.pipe()},
               bp::process_environment(environment_strings(environment)), bp::process_start_dir(cwd),
               ChildExecSetup{::getpid()});
  if (ec) throw Error(fmt::format("cannot start {}: {}", exe.string(), ec.message()), 1);
  impl_->proc.emplace(std::move(proc));
  impl_->out.start();
  impl_->err.start();
  // The completion's int is Boost's evaluated code (an exit code, or a
  // signal's number): the wait status is native_exit_code().
  impl_->proc->async_wait([impl = impl_.get()](bp::error_code wait_ec, int) {
    impl->wait_status = wait_ec ? (255 << 8) : impl->proc->native_exit_code();
    impl->maybe_exited();
  });
}

AgentStepProcess::~AgentStepProcess() = default;

int AgentStepProcess::pid() const { return impl_->proc ? impl_->proc->id() : -1; }
bool AgentStepProcess::running() const { return impl_->proc && !impl_->wait_status; }

void AgentStepProcess::signal(int sig) const {
  if (running()) ::kill(impl_->proc->id(), sig);
}

void run_slurm_command(boost::asio::io_context& io, const std::vector<std::string>& argv,
                       const env::Environment& environment,
                       std::function<void(const std::string& out, int wait_status)> done) {
  struct Query {
    Query(boost::asio::io_context& io, std::function<void(const std::string&, int)> cb)
        : out(
              io, [this](const std::string& l) { text += l + "\n"; }, [this] { finish(); }),
          done(std::move(cb)) {}
    void finish() {
      if (++events < 2) return;
      done(text, status);
      self.reset();  // last use of this
    }
    LineReader out;
    std::string text;
    int status = 0;
    int events = 0;
    std::function<void(const std::string&, int)> done;
    std::optional<bp::process> proc;
    std::shared_ptr<Query> self;
  };
  auto q = std::make_shared<Query>(io, std::move(done));
  auto exe = find_slurm_program(argv.at(0), environment);
  std::vector<std::string> args(argv.begin() + 1, argv.end());
  bp::error_code ec;
  bp::default_process_launcher launcher;
  auto proc = launcher(io.get_executor(), ec, exe, args, bp::process_stdio{nullptr, q->out.pipe(), nullptr},
                       bp::process_environment(environment_strings(environment)), ChildExecSetup{::getpid()});
  if (ec) throw Error(fmt::format("cannot start {}: {}", exe.string(), ec.message()), 1);
  q->proc.emplace(std::move(proc));
  q->self = q;
  q->out.start();
  q->proc->async_wait([q = q.get()](bp::error_code wait_ec, int) {
    q->status = wait_ec ? (255 << 8) : q->proc->native_exit_code();
    q->finish();
  });
}

}  // namespace sgpu::launcher
