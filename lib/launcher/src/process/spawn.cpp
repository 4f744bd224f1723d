#include "process/spawn.hpp"

#include <fcntl.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <system_error>

#include "sgpu/launcher/process/orphan_reaper.hpp"

namespace sgpu::launcher {
namespace {

constexpr std::size_t kChildStack = 64 * 1024;

struct Child {
  const SpawnRequest* request;
  int error = 0;  // written by the child (shared memory) when a step fails
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
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction old {};
    if (sig == SIGKILL || sig == SIGSTOP || ::sigaction(sig, nullptr, &old) != 0) continue;
    if (old.sa_handler == SIG_DFL || (old.sa_handler == SIG_IGN && sig != SIGPIPE)) continue;
    ::sigaction(sig, &dfl, nullptr);
  }
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
  for (int target = 0; target < 3; ++target) {
    int source = req.stdio[target];
    int rc = source == target ? ::fcntl(target, F_SETFD, 0) : ::dup2(source, target);
    if (rc < 0) {
      child.error = errno;
      ::_exit(127);
    }
  }
  // Only 0-2 cross: no pipe of another rank, no socket of sgpu's (an exec_fd
  // stays open to exec, and closes with it: close-on-exec).
  if (req.exec_fd > 3) ::close_range(3, static_cast<unsigned>(req.exec_fd) - 1, 0);
  ::close_range(req.exec_fd >= 3 ? static_cast<unsigned>(req.exec_fd) + 1 : 3U, ~0U, 0);
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
  if (req.exec_fd >= 0)
    ::fexecve(req.exec_fd, const_cast<char* const*>(req.argv), const_cast<char* const*>(req.envp));
  else
    ::execve(req.path, const_cast<char* const*>(req.argv), const_cast<char* const*>(req.envp));
  child.error = errno;
  ::_exit(127);
}

}  // namespace

Spawned spawn_process(const SpawnRequest& request) {
  void* stack = ::mmap(nullptr, kChildStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) throw std::system_error(errno, std::generic_category(), request.path);
  Child child{&request};
  // No signal handler may run in the child before it resets them all.
  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, &before);
  int pidfd = -1;
  pid_t pid = ::clone(child_main, static_cast<char*>(stack) + kChildStack,
                      CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, &child, &pidfd);
  int clone_errno = errno;
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  ::munmap(stack, kChildStack);
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
