#include "sgpu/launcher/process/command.hpp"

#include <unistd.h>
#include <array>
#include <csignal>
#include <memory>
#include <system_error>

#include <fmt/format.h>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/launcher/process/child_process.hpp"

namespace sgpu::launcher {
namespace asio = boost::asio;

namespace {

// A ChildProcess, so started without fork (see child_process.hpp).
struct Running : std::enable_shared_from_this<Running> {
  Running(asio::io_context& io_, std::size_t max, std::function<void(CommandResult)> cb)
      : io(io_), timer(io_), max_output(max), done(std::move(cb)) {}

  void read(asio::readable_pipe& pipe, std::string& into, std::array<char, 4096>& buffer) {
    pipe.async_read_some(asio::buffer(buffer), [self = shared_from_this(), &pipe, &into, &buffer](
                                                   boost::system::error_code ec, std::size_t n) {
      if (into.size() < self->max_output) into.append(buffer.data(), std::min(n, self->max_output - into.size()));
      if (!ec) return self->read(pipe, into, buffer);
      self->step();
    });
  }

  // Three events end it: both pipes closed and the exit.
  void step() {
    if (++events < 3 || answered) return;
    answered = true;
    timer.cancel();
    asio::post(io, [self = shared_from_this()] {
      self->proc.reset();
      self->done(std::move(self->result));
    });
  }

  asio::io_context& io;
  asio::steady_timer timer;
  std::array<char, 4096> out_buffer{};
  std::array<char, 4096> err_buffer{};
  std::size_t max_output;
  std::function<void(CommandResult)> done;
  std::unique_ptr<ChildProcess> proc;
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
  auto exe = find_on_path(argv.front(), environment);
  if (exe.empty()) return fail(fmt::format("'{}' not found on PATH", argv.front()));
  try {
    ChildOptions options{argv, exe, environment, {}, {}, ChildStream::pipe(), ChildStream::pipe()};
    options.own_session = true;  // no controlling terminal, as a rank
    r->proc = std::make_unique<ChildProcess>(io, options);
  } catch (const std::system_error& e) {
    return fail(fmt::format("cannot start {}: {}", exe, std::generic_category().message(e.code().value())));
  }
  r->read(r->proc->out(), r->result.out, r->out_buffer);
  r->read(r->proc->err(), r->result.err, r->err_buffer);
  r->proc->async_wait([r](int status) {
    r->result.status = env::ExitStatus::from_wait_status(status);
    r->step();
  });
  r->timer.expires_after(limit);
  r->timer.async_wait([r](boost::system::error_code timer_ec) {
    if (timer_ec || r->answered || !r->proc) return;
    r->result.timed_out = true;
    r->proc->signal_group(SIGKILL);  // its group: a helper's own children too
  });
}

}  // namespace sgpu::launcher
