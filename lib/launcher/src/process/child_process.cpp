#include "sgpu/launcher/process/child_process.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

#include <boost/asio/error.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "process/child_exec.hpp"
#include "process/spawn.hpp"
#include "sgpu/launcher/process/orphan_reaper.hpp"

namespace sgpu::launcher {

namespace {

constexpr std::string_view kDefaultPath = "/usr/local/bin:/usr/bin:/bin";
constexpr int kNoStatus = 255 << 8;  // what a wait that failed reports: exit 255

std::string search_path(const std::string& name, std::string_view path) {
  if (name.find('/') != std::string::npos) return name;
  while (!path.empty()) {
    auto colon = path.find(':');
    auto dir = path.substr(0, colon);
    if (!dir.empty()) {
      auto candidate = std::string(dir) + "/" + name;
      struct stat st {};
      if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
        return candidate;
    }
    if (colon == std::string_view::npos) break;
    path.remove_prefix(colon + 1);
  }
  return "";
}

// The descriptors of a child being made: each stream's end for the child
// and, for a pipe, sgpu's end. Closes what it still holds.
struct StdioFds {
  int child[3] = {-1, -1, -1};
  int parent[3] = {-1, -1, -1};
  StdioFds(const StdioFds&) = delete;
  StdioFds& operator=(const StdioFds&) = delete;
  StdioFds() = default;
  ~StdioFds() {
    for (int i = 0; i < 3; ++i) {
      if (child[i] >= 0) ::close(child[i]);
      if (parent[i] >= 0) ::close(parent[i]);
    }
  }

  // Throws std::system_error naming what could not be opened.
  void open(int target, const ChildStream& stream) {
    bool input = target == 0;
    switch (stream.kind) {
      case ChildStream::Kind::Null:
        child[target] = ::open("/dev/null", (input ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
        if (child[target] < 0) throw std::system_error(errno, std::generic_category(), "/dev/null");
        return;
      case ChildStream::Kind::File:
        child[target] = input ? ::open(stream.file.c_str(), O_RDONLY | O_CLOEXEC)
                              : ::open(stream.file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (child[target] < 0) throw std::system_error(errno, std::generic_category(), stream.file);
        return;
      case ChildStream::Kind::Pipe: {
        int ends[2];
        if (::pipe2(ends, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
        child[target] = input ? ends[0] : ends[1];
        parent[target] = input ? ends[1] : ends[0];
        return;
      }
    }
  }

  int take_parent(int target) { return std::exchange(parent[target], -1); }
};

}  // namespace

std::string find_on_path(const std::string& name, const env::Environment& environment) {
  auto it = environment.find("PATH");
  return search_path(name, it == environment.end() ? kDefaultPath : std::string_view(it->second));
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");  // NOLINT(concurrency-mt-unsafe): sgpu never sets its environment
  return search_path(name, path ? std::string_view(path) : kDefaultPath);
}

struct ChildProcess::Impl {
  Impl(const boost::asio::any_io_executor& executor, pid_t child, int fd) : pidfd(executor, fd), pid(child) {}

  // The one place a wait's outcome becomes a status: the child is reaped.
  int settle(int wait_status) {
    reaped = true;
    status = wait_status;
    forget_own_child(pid);  // its number may now go to another process
    return status;
  }

  // Reaps the child if it has exited; false while it runs.
  bool try_reap() {
    int wait_status = 0;
    pid_t got = 0;
    while ((got = ::waitpid(pid, &wait_status, WNOHANG)) < 0 && errno == EINTR) {
    }
    if (got == 0) return false;
    settle(got == pid ? wait_status : kNoStatus);
    return true;
  }

  // Waits, on the loop, for the pidfd to say the child has exited. A wake
  // is only a hint: the reactor can pass on a readiness that belonged to a
  // descriptor closed while its event was queued (Asio's epoll reactor hands
  // that descriptor's state to the next one opened: a reaped squeue's pidfd
  // woke the srun step's wait). Boost.Process's async_wait then blocked the
  // loop in waitpid until srun ended; here a child still running is waited
  // for again.
  static void wait_exit(const std::shared_ptr<Impl>& self, std::function<void(int)> on_exit) {
    std::weak_ptr<Impl> weak = self;
    self->pidfd.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                           [weak, cb = std::move(on_exit)](boost::system::error_code ec) mutable {
                             auto impl = weak.lock();
                             // Gone: the ChildProcess closed the pidfd, which ended this wait.
                             if (!impl || ec == boost::asio::error::operation_aborted) return;
                             if (!ec && !impl->try_reap()) return wait_exit(impl, std::move(cb));
                             int wait_status = ec ? impl->settle(kNoStatus) : impl->status;
                             impl.reset();  // the callback may destroy the ChildProcess
                             cb(wait_status);
                           });
  }

  boost::asio::posix::stream_descriptor pidfd;  // readable once the child has exited
  pid_t pid;
  int status = kNoStatus;
  bool reaped = false;
  bool detached = false;
};

ChildProcess::ChildProcess(boost::asio::io_context& io, const SpawnRequest& request, int* exec_error)
    : in_(io), out_(io), err_(io) {
  start(io, request, exec_error);
}

ChildProcess::ChildProcess(boost::asio::io_context& io, const ChildOptions& options) : in_(io), out_(io), err_(io) {
  if (options.argv.empty()) throw std::system_error(EINVAL, std::generic_category(), "no program");
  auto exe = options.program;
  if (exe.empty())
    exe = options.environment ? find_on_path(options.argv[0], *options.environment) : find_on_path(options.argv[0]);
  if (exe.empty()) throw std::system_error(ENOENT, std::generic_category(), options.argv[0]);
  auto argv = c_strings(options.argv);
  std::optional<ExecEnvironment> env;
  if (options.environment) env.emplace(*options.environment);

  StdioFds fds;
  fds.open(0, options.in);
  fds.open(1, options.out);
  fds.open(2, options.err);
  SpawnRequest req;
  req.path = exe.c_str();
  req.argv = argv.data();
  req.envp = env ? env->envp() : environ;
  req.cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  for (int i = 0; i < 3; ++i) req.stdio[i] = fds.child[i];
  req.parent = options.dies_with_sgpu ? ::getpid() : 0;
  req.new_session = options.own_session;
  start(io, req);
  try {
    if (fds.parent[0] >= 0) in_.assign(fds.take_parent(0));
    if (fds.parent[1] >= 0) out_.assign(fds.take_parent(1));
    if (fds.parent[2] >= 0) err_.assign(fds.take_parent(2));
  } catch (...) {
    kill_and_reap();  // no destructor runs for a half-made ChildProcess
    throw;
  }
}

void ChildProcess::start(boost::asio::io_context& io, const SpawnRequest& request, int* exec_error) {
  auto child = exec_error != nullptr ? start_spawn(request, exec_error) : spawn_process(request);
  pid_ = child.pid;
  try {
    impl_ = std::make_shared<Impl>(io.get_executor(), child.pid, child.pidfd);
  } catch (...) {  // the pidfd could not join the loop: the child goes now
    ::kill(-child.pid, SIGKILL);
    ::kill(child.pid, SIGKILL);
    while (::waitpid(child.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    forget_own_child(child.pid);
    if (exec_error != nullptr) settle_spawns();  // the caller's request and *exec_error go with this throw
    throw;
  }
}

ChildProcess::~ChildProcess() { kill_and_reap(); }

void ChildProcess::kill_and_reap() {
  if (!impl_ || impl_->reaped || impl_->detached) return;
  // Never left behind: its group first, with what it started (a
  // ProxyCommand), while its unreaped number still names that group.
  ::kill(-pid_, SIGKILL);
  signal(SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  impl_->reaped = true;
  forget_own_child(pid_);
}

void ChildProcess::signal_group(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

void ChildProcess::signal(int sig) const {
  if (!impl_ || impl_->reaped) return;
  ::syscall(SYS_pidfd_send_signal, impl_->pidfd.native_handle(), sig, nullptr, 0);  // a process gone is no error
}

bool ChildProcess::exited() const {
  if (!impl_ || impl_->reaped) return true;
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return errno == ECHILD;
  return info.si_pid == pid_;  // a peek: the status stays for the wait
}

void ChildProcess::async_wait(std::function<void(int)> on_exit) { Impl::wait_exit(impl_, std::move(on_exit)); }

int ChildProcess::wait() {
  if (!impl_) return kNoStatus;
  if (impl_->reaped) return impl_->status;
  int wait_status = 0;
  pid_t got = 0;
  while ((got = ::waitpid(pid_, &wait_status, 0)) < 0 && errno == EINTR) {
  }
  return impl_->settle(got == pid_ ? wait_status : kNoStatus);
}

void ChildProcess::detach() {
  if (!impl_ || impl_->reaped || impl_->detached) return;
  impl_->detached = true;
  forget_own_child(pid_);
}

}  // namespace sgpu::launcher
