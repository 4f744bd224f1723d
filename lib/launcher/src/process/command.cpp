#include "sgpu/launcher/process/command.hpp"

#include "process/child_exec.hpp"

#include <unistd.h>
#include <array>
#include <csignal>
#include <memory>

#include <fmt/format.h>
#include <boost/asio/post.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/process/v2/environment.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/stdio.hpp>

namespace sgpu::launcher {
namespace asio = boost::asio;
namespace bp = boost::process::v2;

namespace {

struct Running : std::enable_shared_from_this<Running> {
  Running(asio::io_context& io_, std::size_t max, std::function<void(CommandResult)> cb)
      : io(io_), out(io_), err(io_), timer(io_), max_output(max), done(std::move(cb)) {}

  void read(asio::readable_pipe& pipe, std::string& into, std::array<char, 4096>& buffer) {
    pipe.async_read_some(asio::buffer(buffer), [self = shared_from_this(), &pipe, &into, &buffer](
                                                   boost::system::error_code ec, std::size_t n) {
      if (into.size() < self->max_output) into.append(buffer.data(), std::min(n, self->max_output - into.size()));
      if (!ec) return self->read(pipe, into, buffer);
      self->step();
    });
  }

  // Three events end it: both pipes closed and the exit (or the limit's kill).
  void step() {
    if (++events < 3 || answered) return;
    answered = true;
    timer.cancel();
    asio::post(io, [self = shared_from_this()] { self->done(std::move(self->result)); });
  }

  asio::io_context& io;
  asio::readable_pipe out;
  asio::readable_pipe err;
  asio::steady_timer timer;
  std::array<char, 4096> out_buffer{};
  std::array<char, 4096> err_buffer{};
  std::size_t max_output;
  std::function<void(CommandResult)> done;
  std::optional<bp::process> proc;
  CommandResult result;
  int events = 0;
  bool answered = false;
};

}  // namespace

void run_command(asio::io_context& io, const std::vector<std::string>& argv, const env::Environment& environment,
                 std::chrono::milliseconds limit, std::size_t max_output, std::function<void(CommandResult)> done) {
  auto r = std::make_shared<Running>(io, max_output, std::move(done));
  auto fail = [&](std::string why) {
    r->result.start_error = std::move(why);
    asio::post(io, [r] { r->done(std::move(r->result)); });
  };
  if (argv.empty()) return fail("no program");
  bp::filesystem::path exe = argv.front();
  if (argv.front().find('/') == std::string::npos) exe = bp::environment::find_executable(argv.front(), environment);
  if (exe.empty()) return fail(fmt::format("'{}' not found on PATH", argv.front()));
  std::vector<std::string> args(argv.begin() + 1, argv.end());
  bp::error_code ec;
  bp::default_process_launcher launcher;
  auto proc = launcher(io.get_executor(), ec, exe, args, bp::process_stdio{nullptr, r->out, r->err},
                       bp::process_environment(environment_strings(environment)), ChildExecSetup{::getpid()});
  if (ec) return fail(fmt::format("cannot start {}: {}", exe.string(), ec.message()));
  r->proc.emplace(std::move(proc));
  r->read(r->out, r->result.out, r->out_buffer);
  r->read(r->err, r->result.err, r->err_buffer);
  r->proc->async_wait([r](bp::error_code wait_ec, int status) {
    r->result.status = wait_ec ? env::ExitStatus::exited(255) : env::ExitStatus::from_wait_status(status);
    r->step();
  });
  r->timer.expires_after(limit);
  r->timer.async_wait([r](boost::system::error_code timer_ec) {
    if (timer_ec || r->answered || !r->proc) return;
    r->result.timed_out = true;
    ::kill(-r->proc->id(), SIGKILL);  // its group: a helper's own children too
  });
}

}  // namespace sgpu::launcher
