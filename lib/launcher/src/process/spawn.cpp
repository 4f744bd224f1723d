#include "process/spawn.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "sgpu/launcher/process/orphan_reaper.hpp"

namespace sgpu::launcher {
namespace {

constexpr std::size_t kChildStack = 64 * 1024;

// The child shares sgpu's descriptor table (CLONE_FILES) for an instant:
// its first call unshares it keeping only the numbers below kSlots' end, and
// what it needs (its stdio, the file it execs) was put there, in four slots
// held open on /dev/null. Without it every child copied sgpu's table and
// closed each entry (close_range walks them all): with 1000 ranks, 3000 pipes
// and pidfds closed 1000 times, a seventh of the time to start them.
constexpr int kSlots = 4;  // stdin, stdout, stderr, exec_fd

struct Slots {
  int fd[kSlots] = {-1, -1, -1, -1};
  int devnull = -1;
  int end = 0;  // one past the highest slot: the child keeps [0, end)
  bool ok = false;
};

Slots& slots() {
  static Slots s = [] {
    Slots made;
    made.devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (made.devnull < 0) return made;
    for (int& fd : made.fd) {
      fd = ::fcntl(made.devnull, F_DUPFD_CLOEXEC, 3);
      if (fd < 0) return made;
      made.end = std::max(made.end, fd + 1);
    }
    made.end = std::max(made.end, made.devnull + 1);
    made.ok = made.end <= 64;  // low numbers, or the copy is no cheaper than before
    return made;
  }();
  return s;
}

struct Child {
  const SpawnRequest* request;
  const Slots* slots = nullptr;      // set: sharing sgpu's table, the request's fds are in the slots
  const sigset_t* caught = nullptr;  // the signals to set back to their default (caught_signals())
  int error = 0;                     // written by the child (shared memory) when a step fails
};

// Runs on its own stack in sgpu's memory while sgpu is suspended
// (CLONE_VFORK): system calls only, nothing that allocates or locks.
int child_main(void* arg) {
  auto& child = *static_cast<Child*>(arg);
  const auto& req = *child.request;
  // A handler of sgpu's would run sgpu's code here (Asio's signal pipe):
  // back to the default before any signal is unblocked. Ignored signals stay
  // ignored, as across any exec, except SIGPIPE, which only sgpu ignores.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (::sigismember(child.caught, sig) == 1) ::sigaction(sig, &dfl, nullptr);
  // Its own session (so its own group): the terminal's Ctrl-C reaches sgpu,
  // which decides what to pass on, and a rank that reads the terminal gets
  // end of file instead of being stopped by SIGTTIN. Other children (ssh,
  // srun, salloc) only get a group: what sgpu starts itself stays in its
  // session, where the orphan sweep leaves it to its owner.
  if (!req.new_session || ::setsid() < 0) ::setpgid(0, 0);
  if (req.parent != 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != req.parent) ::_exit(128 + SIGKILL);  // sgpu died before prctl took effect
    // Under Yama's ptrace_scope 1 only an ancestor may trace: this lets sgpu
    // and its children (py-spy for `sgpu stacks`, --hang-timeout) read the
    // rank's stack. EINVAL without Yama, which is fine.
    ::prctl(PR_SET_PTRACER, static_cast<unsigned long>(req.parent), 0, 0, 0);
  }
  int stdio[3] = {req.stdio[0], req.stdio[1], req.stdio[2]};
  int exec_fd = req.exec_fd;
  if (child.slots != nullptr) {
    // First of all: a table of its own, before it changes any descriptor.
    if (::syscall(SYS_close_range, child.slots->end, ~0U, CLOSE_RANGE_UNSHARE) != 0) {
      if (::unshare(CLONE_FILES) != 0) {  // a kernel before 5.9: the whole copy, as before
        child.error = errno;
        ::_exit(127);
      }
      ::close_range(static_cast<unsigned>(child.slots->end), ~0U, 0);
    }
    for (int target = 0; target < 3; ++target)
      if (stdio[target] >= 0) stdio[target] = child.slots->fd[target];
    if (exec_fd >= 0) exec_fd = child.slots->fd[3];
  }
  for (int target = 0; target < 3; ++target) {
    int source = stdio[target];
    int rc = source == target ? ::fcntl(target, F_SETFD, 0) : ::dup2(source, target);
    if (rc < 0) {
      child.error = errno;
      ::_exit(127);
    }
  }
  // Only 0-2 cross: no pipe of another rank, no socket of sgpu's (an exec_fd
  // stays open to exec, and closes with it: close-on-exec).
  if (exec_fd > 3) ::close_range(3, static_cast<unsigned>(exec_fd) - 1, 0);
  ::close_range(exec_fd >= 3 ? static_cast<unsigned>(exec_fd) + 1 : 3U, ~0U, 0);
  if (req.open_files) ::setrlimit(RLIMIT_NOFILE, req.open_files);
  // The binding, as raw system calls (glibc's wrappers are not promised
  // async-signal-safe). A kernel without NUMA (ENOSYS) has one memory node.
  if (req.cpus != nullptr && ::syscall(SYS_sched_setaffinity, 0, req.cpus_size, req.cpus) != 0) {
    child.error = errno;
    ::_exit(127);
  }
  if (req.numa_nodes != nullptr &&
      ::syscall(SYS_set_mempolicy, MPOL_PREFERRED, req.numa_nodes, req.numa_bits + 1) != 0 && errno != ENOSYS) {
    child.error = errno;
    ::_exit(127);
  }
  if (req.cwd && ::chdir(req.cwd) != 0) {
    child.error = errno;
    ::_exit(127);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (exec_fd >= 0)
    ::fexecve(exec_fd, const_cast<char* const*>(req.argv), const_cast<char* const*>(req.envp));
  else
    ::execve(req.path, const_cast<char* const*>(req.argv), const_cast<char* const*>(req.envp));
  child.error = errno;
  ::_exit(127);
}

}  // namespace

sigset_t caught_signals() {
  sigset_t caught;
  sigemptyset(&caught);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old {};
    if (sig == SIGKILL || sig == SIGSTOP || ::sigaction(sig, nullptr, &old) != 0) continue;
    if (old.sa_handler == SIG_DFL || (old.sa_handler == SIG_IGN && sig != SIGPIPE)) continue;
    sigaddset(&caught, sig);
  }
  return caught;
}

Spawned spawn_process(const SpawnRequest& request) {
  static std::mutex one_at_a_time;  // the slots are shared by every spawn
  std::lock_guard lock(one_at_a_time);
  void* stack = ::mmap(nullptr, kChildStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) throw std::system_error(errno, std::generic_category(), request.path);
  Child child{&request};
  sigset_t caught;
  if (request.caught == nullptr) caught = caught_signals();
  child.caught = request.caught != nullptr ? request.caught : &caught;
  auto& held = slots();
  int flags = CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD;
  if (held.ok) {
    bool placed = true;
    int sources[kSlots] = {request.stdio[0], request.stdio[1], request.stdio[2], request.exec_fd};
    for (int i = 0; i < kSlots; ++i)
      if (sources[i] >= 0 && ::dup3(sources[i], held.fd[i], O_CLOEXEC) < 0) placed = false;
    if (placed) {
      child.slots = &held;
      flags |= CLONE_FILES;
    }
  }
  // No signal handler may run in the child before it resets them all.
  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &before);
  int pidfd = -1;
  pid_t pid = ::clone(child_main, static_cast<char*>(stack) + kChildStack, flags, &child, &pidfd);
  int clone_errno = errno;
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  ::munmap(stack, kChildStack);
  // The slots let go of the child's descriptors: a pipe's end held here would keep its reader from EOF.
  if (held.ok)
    for (int fd : held.fd) ::dup3(held.devnull, fd, O_CLOEXEC);
  if (pid < 0 && clone_errno == EINVAL) {
    // The flags are fixed, so EINVAL is a kernel that knows no CLONE_PIDFD
    // (before 5.2): say that, not "train.py: Invalid argument".
    struct utsname host {};
    ::uname(&host);
    throw std::runtime_error(
        fmt::format("cannot start {}: this kernel (Linux {}) has no pidfds (CLONE_PIDFD), which "
                    "sgpu waits for its ranks with; it needs Linux 5.3 or newer",
                    request.path, host.release));
  }
  if (pid < 0) throw std::system_error(clone_errno, std::generic_category(), request.path);
  note_own_child(pid);  // its status is the caller's: the SIGCHLD reaper leaves it
  if (child.error != 0) {
    ::close(pidfd);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    forget_own_child(pid);
    throw std::system_error(child.error, std::generic_category(), request.path);
  }
  return {pid, pidfd};
}

}  // namespace sgpu::launcher
