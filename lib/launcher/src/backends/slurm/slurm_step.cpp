#include "backends/slurm/slurm_step.hpp"

#include <array>
#include <optional>
#include <system_error>

#include <fmt/format.h>
#include <boost/asio/readable_pipe.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/process/child_process.hpp"

namespace sgpu::launcher {
namespace {

// Starts a SLURM program found on its environment's PATH, in its own process
// group and killed if sgpu dies; throws sgpu::Error when it cannot start.
std::unique_ptr<ChildProcess> start_slurm_program(boost::asio::io_context& io, ChildOptions options) {
  options.program = find_on_path(options.argv.at(0), *options.environment);
  if (options.program.empty())
    throw Error(fmt::format("--backend slurm: '{}' not found on PATH; is this a SLURM node?", options.argv[0]), 127);
  try {
    return std::make_unique<ChildProcess>(io, options);
  } catch (const std::system_error& e) {
    throw Error(fmt::format("cannot start {}: {}", options.program, e.code().message()), 1);
  }
}

// Splits a pipe into lines; `on_end` once it is closed.
class LineReader {
 public:
  LineReader(std::function<void(const std::string&)> on_line, std::function<void()> on_end)
      : on_line_(std::move(on_line)), on_end_(std::move(on_end)) {}
  // Reads `pipe` (which outlives the reads) to its end.
  void start(boost::asio::readable_pipe& pipe) {
    pipe_ = &pipe;
    pipe_->async_read_some(boost::asio::buffer(buffer_), [this](boost::system::error_code ec, std::size_t n) {
      partial_.append(buffer_.data(), n);
      std::size_t from = 0;
      for (auto nl = partial_.find('\n', from); nl != std::string::npos; nl = partial_.find('\n', from)) {
        on_line_(partial_.substr(from, nl - from));
        from = nl + 1;
      }
      partial_.erase(0, from);
      if (!ec) return start(*pipe_);
      if (!partial_.empty()) on_line_(std::exchange(partial_, {}));
      on_end_();
    });
  }

 private:
  boost::asio::readable_pipe* pipe_ = nullptr;
  std::function<void(const std::string&)> on_line_;
  std::function<void()> on_end_;
  std::array<char, 8192> buffer_{};
  std::string partial_;
};

}  // namespace

struct AgentStepProcess::Impl {
  explicit Impl(Events ev)
      : events(std::move(ev)),
        out([this](const std::string& l) { on_line(l); }, [this] { closed(); }),
        err([this](const std::string& l) { on_line(l); }, [this] { closed(); }) {}

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
  std::unique_ptr<ChildProcess> proc;
  std::optional<int> wait_status;
  int pipes_closed = 0;
  bool reported = false;
};

AgentStepProcess::AgentStepProcess(boost::asio::io_context& io, const std::vector<std::string>& argv,
                                   const env::Environment& environment, const std::string& cwd, Events events)
    : impl_(std::make_unique<Impl>(std::move(events))) {
  impl_->proc = start_slurm_program(io, {argv, {}, environment, cwd, {}, ChildStream::pipe(), ChildStream::pipe()});
  impl_->out.start(impl_->proc->out());
  impl_->err.start(impl_->proc->err());
  impl_->proc->async_wait([impl = impl_.get()](int status) {
    impl->wait_status = status;
    impl->maybe_exited();
  });
}

AgentStepProcess::~AgentStepProcess() = default;

int AgentStepProcess::pid() const { return impl_->proc ? impl_->proc->pid() : -1; }
bool AgentStepProcess::running() const { return impl_->proc && !impl_->wait_status; }

void AgentStepProcess::signal(int sig) const {
  if (running()) impl_->proc->signal(sig);
}

void run_slurm_command(boost::asio::io_context& io, const std::vector<std::string>& argv,
                       const env::Environment& environment,
                       std::function<void(const std::string& out, int wait_status)> done) {
  struct Query {
    explicit Query(std::function<void(const std::string&, int)> cb)
        : out([this](const std::string& l) { text += l + "\n"; }, [this] { finish(); }), done(std::move(cb)) {}
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
    std::unique_ptr<ChildProcess> proc;
    std::shared_ptr<Query> self;
  };
  auto q = std::make_shared<Query>(std::move(done));
  q->proc = start_slurm_program(io, {argv, {}, environment, {}, {}, ChildStream::pipe(), {}});
  q->self = q;
  q->out.start(q->proc->out());
  q->proc->async_wait([q = q.get()](int status) {
    q->status = status;
    q->finish();
  });
}

}  // namespace sgpu::launcher
