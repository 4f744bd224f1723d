#include "process/spawn.hpp"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/futex.h>
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
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "sgpu/launcher/process/orphan_reaper.hpp"

namespace sgpu::launcher {
namespace {

constexpr std::size_t kChildStack = 64 * 1024;

// The child's code makes raw system calls: it shares sgpu's memory, thread
// pointer included, and runs beside sgpu, so a libc wrapper's errno would be
// sgpu's errno, and a sanitizer's interceptor would run as if on sgpu's
// thread. Returns -errno on failure. Elsewhere the child runs with CLONE_VFORK
// (sgpu asleep until it execs) through libc.
#define SGPU_CHILD_CODE __attribute__((no_sanitize("address", "undefined"), always_inline)) inline
#if defined(__x86_64__)
constexpr bool kBeside = true;
SGPU_CHILD_CODE long sys(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
  long ret = 0;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  asm volatile("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8) : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
constexpr bool kBeside = true;
SGPU_CHILD_CODE long sys(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
  register long x8 asm("x8") = nr;
  register long x0 asm("x0") = a;
  register long x1 asm("x1") = b;
  register long x2 asm("x2") = c;
  register long x3 asm("x3") = d;
  register long x4 asm("x4") = e;
  asm volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4) : "memory");
  return x0;
}
#else
constexpr bool kBeside = false;
inline long sys(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0) {
  long ret = ::syscall(nr, a, b, c, d, e);
  return ret < 0 ? -errno : ret;
}
#endif

template <typename T>
SGPU_CHILD_CODE long arg(T* p) {
  return static_cast<long>(reinterpret_cast<std::uintptr_t>(p));
}

// The kernel's struct sigaction (rt_sigaction), the same on x86_64 and
// aarch64: enough to set a signal back to SIG_DFL.
struct KernelSigaction {
  void* handler = nullptr;  // SIG_DFL
  unsigned long flags = 0;
  void* restorer = nullptr;
  unsigned long mask = 0;
};
constexpr long kKernelSigsetSize = 8;

// The child shares sgpu's descriptor table (CLONE_FILES) for an instant:
// its first call unshares it keeping only the numbers below `keep`, and what
// it needs (its stdio, the file it execs) was put there, in four slots held
// open on /dev/null. Without it every child copied sgpu's table and closed
// each entry (close_range walks them all): with 1000 ranks, 3000 pipes and
// pidfds closed 1000 times, a seventh of the time to start them. Each child
// in flight has a set of slots, its stack and its shared state.
constexpr int kSlots = 4;     // stdin, stdout, stderr, exec_fd
constexpr int kInFlight = 8;  // children started and not yet exec'd, at most

struct Child {
  const SpawnRequest* request = nullptr;
  const int* slots = nullptr;  // set: sharing sgpu's table, the request's fds are in these slots
  int keep = 0;                // sharing: the child keeps [0, keep) when it unshares
  int reset[NSIG] = {};        // the signals to set back to their default (caught_signals())
  int resets = 0;
  int error = 0;  // written by the child when a step fails, before it exits
};

struct InFlight {
  Child child;
  int slot[kSlots] = {-1, -1, -1, -1};
  char* stack = nullptr;  // its top
  // 1 from the clone until the kernel clears it (CLONE_CHILD_CLEARTID) and
  // wakes its futex, when the child execs or exits: then the child no longer
  // uses its stack, this, the request or the slots.
  int running = 0;
  int* exec_error = nullptr;  // the caller's, to get child.error
  bool busy = false;
};

struct Spawner {
  std::mutex mutex;
  InFlight sets[kInFlight];
  int devnull = -1;
  int keep = 0;        // one past the highest slot
  bool slots = false;  // the slots are usable: opened, at low numbers
  int next = 0;        // the set to use next, round robin: the oldest start

  Spawner() {
    void* stacks = ::mmap(nullptr, kChildStack * kInFlight, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) throw std::system_error(errno, std::generic_category(), "a child's stack");
    for (int i = 0; i < kInFlight; ++i) sets[i].stack = static_cast<char*>(stacks) + kChildStack * (i + 1);
    devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0) return;
    for (auto& set : sets)
      for (int& fd : set.slot) {
        fd = ::fcntl(devnull, F_DUPFD_CLOEXEC, 3);
        if (fd < 0) return;
        keep = std::max(keep, fd + 1);
      }
    keep = std::max(keep, devnull + 1);
    slots = keep <= 64;  // low numbers, or the copy is no cheaper than before
  }

  // Waits until the set's child has exec'd or exited, and hands its outcome over.
  void settle(InFlight& set) {
    if (!set.busy) return;
    // Not FUTEX_PRIVATE_FLAG: the kernel's wake on the cleared word is a shared one.
    while (__atomic_load_n(&set.running, __ATOMIC_ACQUIRE) != 0)
      ::syscall(SYS_futex, &set.running, FUTEX_WAIT, 1, nullptr, nullptr, 0);
    *set.exec_error = set.child.error;
    release_slots(set);
    set.busy = false;
  }

  // The slots let go of the child's descriptors: a pipe's end held here would keep its reader from EOF.
  void release_slots(InFlight& set) const {
    if (slots)
      for (int fd : set.slot) ::dup3(devnull, fd, O_CLOEXEC);
  }

  void settle_all() {
    for (int i = 0; i < kInFlight; ++i) settle(sets[(next + i) % kInFlight]);
  }
};

Spawner& spawner() {
  static Spawner s;
  return s;
}

[[noreturn]] SGPU_CHILD_CODE void fail(Child& child, long ret) {
  child.error = static_cast<int>(-ret);
  sys(SYS_exit_group, 127);
  __builtin_unreachable();
}

// Runs on its own stack in sgpu's memory, beside sgpu: raw system calls
// only, nothing that allocates, locks or touches errno.
__attribute__((no_sanitize("address", "undefined"))) int child_main(void* arg_ptr) {
  auto& child = *static_cast<Child*>(arg_ptr);
  const auto& req = *child.request;
  // A handler of sgpu's would run sgpu's code here (Asio's signal pipe):
  // back to the default before any signal is unblocked. Ignored signals stay
  // ignored, as across any exec, except SIGPIPE, which only sgpu ignores.
  KernelSigaction dfl;
  for (int i = 0; i < child.resets; ++i) sys(SYS_rt_sigaction, child.reset[i], arg(&dfl), 0, kKernelSigsetSize);
  // Its own session (so its own group): the terminal's Ctrl-C reaches sgpu,
  // which decides what to pass on, and a rank that reads the terminal gets
  // end of file instead of being stopped by SIGTTIN. Other children (ssh,
  // srun, salloc) only get a group: what sgpu starts itself stays in its
  // session, where the orphan sweep leaves it to its owner.
  if (!req.new_session || sys(SYS_setsid) < 0) sys(SYS_setpgid, 0, 0);
  if (req.parent != 0) {
    sys(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL);
    if (sys(SYS_getppid) != req.parent) sys(SYS_exit_group, 128 + SIGKILL);  // sgpu died before prctl took effect
    // Under Yama's ptrace_scope 1 only an ancestor may trace: this lets sgpu
    // and its children (py-spy for `sgpu stacks`, --hang-timeout) read the
    // rank's stack. EINVAL without Yama, which is fine.
    sys(SYS_prctl, PR_SET_PTRACER, req.parent);
  }
  int stdio[3] = {req.stdio[0], req.stdio[1], req.stdio[2]};
  int exec_fd = req.exec_fd;
  if (child.slots != nullptr) {
    // First of all: a table of its own, before it changes any descriptor.
    if (sys(SYS_close_range, child.keep, ~0U, CLOSE_RANGE_UNSHARE) != 0) {
      long ret = sys(SYS_unshare, CLONE_FILES);  // a kernel before 5.9: the whole copy, as before
      if (ret != 0) fail(child, ret);
      sys(SYS_close_range, child.keep, ~0U, 0);
    }
    for (int target = 0; target < 3; ++target)
      if (stdio[target] >= 0) stdio[target] = child.slots[target];
    if (exec_fd >= 0) exec_fd = child.slots[3];
  }
  for (int target = 0; target < 3; ++target) {
    int source = stdio[target];
    long ret = source == target ? sys(SYS_fcntl, target, F_SETFD, 0) : sys(SYS_dup3, source, target, 0);
    if (ret < 0) fail(child, ret);
  }
  // Only 0-2 cross: no pipe of another rank, no socket of sgpu's (an exec_fd
  // stays open to exec, and closes with it: close-on-exec).
  if (exec_fd > 3) sys(SYS_close_range, 3, exec_fd - 1, 0);
  sys(SYS_close_range, exec_fd >= 3 ? exec_fd + 1 : 3, ~0U, 0);
  if (req.open_files) sys(SYS_prlimit64, 0, RLIMIT_NOFILE, arg(req.open_files), 0);
  // The binding. A kernel without NUMA (ENOSYS) has one memory node.
  if (req.cpus != nullptr) {
    long ret = sys(SYS_sched_setaffinity, 0, static_cast<long>(req.cpus_size), arg(req.cpus));
    if (ret != 0) fail(child, ret);
  }
  if (req.numa_nodes != nullptr) {
    long ret = sys(SYS_set_mempolicy, MPOL_PREFERRED, arg(req.numa_nodes), static_cast<long>(req.numa_bits + 1));
    if (ret != 0 && ret != -ENOSYS) fail(child, ret);
  }
  if (req.cwd) {
    long ret = sys(SYS_chdir, arg(req.cwd));
    if (ret != 0) fail(child, ret);
  }
  unsigned long none = 0;
  sys(SYS_rt_sigprocmask, SIG_SETMASK, arg(&none), 0, kKernelSigsetSize);
  long ret = exec_fd >= 0 ? sys(SYS_execveat, exec_fd, arg(""), arg(req.argv), arg(req.envp), AT_EMPTY_PATH)
                          : sys(SYS_execve, arg(req.path), arg(req.argv), arg(req.envp));
  fail(child, ret);
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

Spawned start_spawn(const SpawnRequest& request, int* exec_error) {
  auto& s = spawner();
  std::lock_guard lock(s.mutex);
  auto& set = s.sets[s.next];
  s.settle(set);  // the oldest start: every set is in flight
  s.next = (s.next + 1) % kInFlight;
  auto& child = set.child;
  child = Child{};
  child.request = &request;
  sigset_t caught;
  if (request.caught == nullptr) caught = caught_signals();
  const sigset_t* reset = request.caught != nullptr ? request.caught : &caught;
  for (int sig = 1; sig < NSIG; ++sig)
    if (::sigismember(reset, sig) == 1) child.reset[child.resets++] = sig;
  int flags = CLONE_VM | CLONE_PIDFD | CLONE_CHILD_CLEARTID | SIGCHLD;
  if (!kBeside) flags |= CLONE_VFORK;
  if (s.slots) {
    bool placed = true;
    int sources[kSlots] = {request.stdio[0], request.stdio[1], request.stdio[2], request.exec_fd};
    for (int i = 0; i < kSlots; ++i)
      if (sources[i] >= 0 && ::dup3(sources[i], set.slot[i], O_CLOEXEC) < 0) placed = false;
    if (placed) {
      child.slots = set.slot;
      child.keep = s.keep;
      flags |= CLONE_FILES;
    }
  }
  // No signal handler may run in the child before it resets them all.
  sigset_t all;
  sigset_t before;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &before);
  set.running = 1;
  int pidfd = -1;
  pid_t pid = ::clone(child_main, set.stack, flags, &child, &pidfd, nullptr, &set.running);
  int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &before, nullptr);
  if (pid < 0) {
    set.running = 0;
    s.release_slots(set);
    if (clone_errno == EINVAL) {
      // The flags are fixed, so EINVAL is a kernel that knows no CLONE_PIDFD
      // (before 5.2): say that, not "train.py: Invalid argument".
      struct utsname host {};
      ::uname(&host);
      throw std::runtime_error(
          fmt::format("cannot start {}: this kernel (Linux {}) has no pidfds (CLONE_PIDFD), which "
                      "sgpu waits for its ranks with; it needs Linux 5.3 or newer",
                      request.path, host.release));
    }
    throw std::system_error(clone_errno, std::generic_category(), request.path);
  }
  note_own_child(pid);  // its status is the caller's: the SIGCHLD reaper leaves it
  set.exec_error = exec_error;
  set.busy = true;
  return {pid, pidfd};
}

void settle_spawns() {
  auto& s = spawner();
  std::lock_guard lock(s.mutex);
  s.settle_all();
}

Spawned spawn_process(const SpawnRequest& request) {
  int error = 0;
  auto child = start_spawn(request, &error);
  settle_spawns();
  if (error != 0) {
    ::close(child.pidfd);
    while (::waitpid(child.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    forget_own_child(child.pid);
    throw std::system_error(error, std::generic_category(), request.path);
  }
  return child;
}

}  // namespace sgpu::launcher
