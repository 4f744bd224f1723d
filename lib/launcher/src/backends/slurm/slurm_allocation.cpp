#include "backends/slurm/slurm_allocation.hpp"

#include <array>
#include <csignal>
#include <system_error>

#include <fmt/format.h>
#include <boost/asio/write.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/process/child_process.hpp"

namespace sgpu::launcher {

struct SallocHold::Impl {
  explicit Impl(Events ev) : events(std::move(ev)) {}

  // Its stdin is the hold command's (the hold pipe, sgpu's end in()), its
  // stderr what sgpu listens to.
  std::unique_ptr<ChildProcess> proc;
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
    proc->err().async_read_some(boost::asio::buffer(buffer), [this](boost::system::error_code ec, std::size_t n) {
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
    end.wait_status = proc->wait();  // already closing its stderr: this reaps it
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
    boost::system::error_code ignored;
    if (proc) proc->in().close(ignored);
  }
};

SallocHold::SallocHold(boost::asio::io_context& io, std::vector<std::string> argv, const env::Environment& environment,
                       const std::string& cwd, Events events)
    : impl_(std::make_unique<Impl>(std::move(events))) {
  ChildOptions options{std::move(argv), {}, environment, cwd, ChildStream::pipe(), {}, ChildStream::pipe()};
  options.program = find_on_path(options.argv.at(0), environment);
  if (options.program.empty())
    throw Error(fmt::format("--backend slurm: '{}' not found on PATH; is this a SLURM login node?", options.argv[0]),
                127);
  // Its own process group but no PDEATHSIG: salloc must outlive a killed sgpu to release the job.
  options.dies_with_sgpu = false;
  try {
    impl_->proc = std::make_unique<ChildProcess>(io, options);
  } catch (const std::system_error& e) {
    throw Error(fmt::format("cannot start {}: {}", options.program, e.code().message()), 1);
  }
  impl_->read_stderr();
}

SallocHold::~SallocHold() {
  impl_->close_hold();  // the job ends (exit code 1) if it was not released
  // salloc is left to finish on its own: it releases the allocation when its
  // command reads end of file, sgpu or no sgpu.
  if (!impl_->ended) impl_->proc->detach();
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
  impl_->proc->signal(SIGINT);  // salloc withdraws a pending request
}

void SallocHold::release(int exit_code) {
  if (impl_->ended) return;
  if (impl_->proc->in().is_open()) {
    impl_->released = true;
    auto code = fmt::format("{}\n", exit_code & 0xff);
    // A few bytes into an empty pipe: one write that cannot block.
    boost::system::error_code ignored;
    boost::asio::write(impl_->proc->in(), boost::asio::buffer(code), ignored);
    impl_->close_hold();
  }
  impl_->listening = true;
  impl_->read_stderr();
}

}  // namespace sgpu::launcher
