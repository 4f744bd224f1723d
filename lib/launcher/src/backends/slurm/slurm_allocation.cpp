#include "backends/slurm/slurm_allocation.hpp"

#include "process/child_exec.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstring>

#include <fmt/format.h>
#include <boost/asio/read.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/process/v2/environment.hpp>
#include <boost/process/v2/process.hpp>
#include <boost/process/v2/start_dir.hpp>
#include <boost/process/v2/stdio.hpp>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace bp = boost::process::v2;

struct SallocHold::Impl {
  Impl(boost::asio::io_context& io, Events ev) : err(io), events(std::move(ev)) {}

  boost::asio::readable_pipe err;
  std::optional<bp::process> proc;
  int hold_fd = -1;  // write end of the hold command's stdin
  Events events;
  std::string job_id;
  bool granted = false;
  bool listening = true;  // reading salloc's stderr (not between the grant and release())
  bool reading = false;   // a read is in flight
  bool ended = false;
  bool released = false;
  bool cancelled = false;
  std::string partial;
  std::array<char, 4096> buffer{};
  SallocEnd end;
  std::optional<slurm::SallocLine::Kind> revoked;

  void read_stderr() {
    if (reading || ended) return;
    reading = true;
    err.async_read_some(boost::asio::buffer(buffer), [this](boost::system::error_code ec, std::size_t n) {
      reading = false;
      partial.append(buffer.data(), n);
      std::size_t start = 0;
      for (auto nl = partial.find('\n'); nl != std::string::npos; nl = partial.find('\n', start)) {
        on_line(partial.substr(start, nl - start));
        start = nl + 1;
      }
      partial.erase(0, start);
      if (ec) {
        if (!partial.empty()) on_line(std::exchange(partial, {}));
        finish();
        return;
      }
      if (listening) read_stderr();
    });
  }

  void on_line(const std::string& line) {
    if (line.empty()) return;
    if (events.line) events.line(line);
    end.last_line = line;
    auto parsed = slurm::parse_salloc_line(line);
    using Kind = slurm::SallocLine::Kind;
    switch (parsed.kind) {
      case Kind::Pending:
        job_id = parsed.job_id;
        if (events.pending) events.pending(job_id);
        break;
      case Kind::Granted:
        job_id = parsed.job_id;
        granted = true;
        listening = released;
        if (events.granted) events.granted(job_id);
        break;
      case Kind::Revoked:
      case Kind::TimeLimit:
        revoked = parsed.kind;
        break;
      case Kind::Error:
        end.errors.push_back(parsed.message);
        break;
      case Kind::Other:
        break;
    }
  }

  // salloc's stderr reached its end: salloc (and its command) are exiting.
  void finish() {
    if (ended) return;
    ended = true;
    close_hold();
    bp::error_code ec;
    if (proc) proc->wait(ec);  // already closing its stderr: this reaps it
    end.wait_status = proc && !ec ? proc->native_exit_code() : (255 << 8);
    using K = SallocEnd::Kind;
    if (revoked == slurm::SallocLine::Kind::TimeLimit)
      end.kind = K::TimeLimit;
    else if (released && granted)
      end.kind = K::Released;
    else if (revoked || cancelled)
      end.kind = cancelled ? K::Cancelled : K::Revoked;
    else
      end.kind = granted ? K::Revoked : K::Refused;
    if (events.ended) events.ended(end);
  }

  void close_hold() {
    if (hold_fd >= 0) ::close(hold_fd);
    hold_fd = -1;
  }
};

SallocHold::SallocHold(boost::asio::io_context& io, std::vector<std::string> argv, const env::Environment& environment,
                       const std::string& cwd, Events events)
    : impl_(std::make_unique<Impl>(io, std::move(events))) {
  auto exe = bp::environment::find_executable(argv.at(0), environment);
  if (exe.empty())
    throw Error(fmt::format("--backend slurm: '{}' not found on PATH; is this a SLURM login node?", argv[0]), 127);
  int hold[2];
  if (::pipe2(hold, O_CLOEXEC) != 0)
    throw Error(fmt::format("cannot create a pipe for salloc: {}", std::strerror(errno)), 1);
  auto env_strings = environment_strings(environment);
  std::vector<std::string> args(argv.begin() + 1, argv.end());
  bp::error_code ec;
  bp::default_process_launcher launcher;
  // Its own process group but no PDEATHSIG: salloc must outlive a killed sgpu to release the job.
  auto proc = launcher(io.get_executor(), ec, exe, args, bp::process_stdio{hold[0], nullptr, impl_->err},
                       bp::process_environment(env_strings), bp::process_start_dir(cwd), ChildExecSetup{});
  ::close(hold[0]);
  if (ec) {
    ::close(hold[1]);
    throw Error(fmt::format("cannot start {}: {}", exe.string(), ec.message()), 1);
  }
  impl_->hold_fd = hold[1];
  impl_->proc.emplace(std::move(proc));
  impl_->read_stderr();
}

SallocHold::~SallocHold() {
  impl_->close_hold();  // the job ends (exit code 1) if it was not released
  // salloc is left to finish on its own: it releases the allocation when its
  // command reads end of file, sgpu or no sgpu.
  if (impl_->proc && !impl_->ended) impl_->proc->detach();
}

const std::string& SallocHold::job_id() const { return impl_->job_id; }
bool SallocHold::granted() const { return impl_->granted; }
bool SallocHold::ended() const { return impl_->ended; }

void SallocHold::cancel() {
  if (impl_->ended) return;
  impl_->cancelled = true;
  if (impl_->granted) {
    release(slurm::kSallocHoldNoCode);
    return;
  }
  ::kill(impl_->proc->id(), SIGINT);  // salloc withdraws a pending request
}

void SallocHold::release(int exit_code) {
  if (impl_->ended) return;
  if (impl_->hold_fd >= 0) {
    impl_->released = true;
    auto code = fmt::format("{}\n", exit_code & 0xff);
    // A few bytes into an empty pipe: one write that cannot block.
    while (::write(impl_->hold_fd, code.data(), code.size()) < 0 && errno == EINTR) {
    }
    impl_->close_hold();
  }
  impl_->listening = true;
  impl_->read_stderr();
}

}  // namespace sgpu::launcher
