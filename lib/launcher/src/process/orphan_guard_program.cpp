// The orphan guard's own program (orphan_guard.hpp), built freestanding: no
// libc, no C++ runtime, system calls only, so the process that waits beside
// every run takes a few pages instead of a copy of sgpu (12 KiB against
// 2.3 MiB of peak RSS). sgpu embeds the executable and starts it from
// memory. Standard input is the pipe from sgpu: 8-byte records, {+1, group}
// to watch a rank's process group, {-1, group} to forget it. At end of file
// (sgpu exited, however) every group still watched gets SIGKILL.
#include <asm/unistd.h>
#include <linux/prctl.h>
#include <linux/signal.h>

namespace {

long sys(long number, long a = 0, long b = 0, long c = 0, long d = 0) {
#if defined(__x86_64__)
  long ret;
  register long r10 asm("r10") = d;
  asm volatile("syscall" : "=a"(ret) : "a"(number), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 asm("x8") = number;
  register long x0 asm("x0") = a;
  register long x1 asm("x1") = b;
  register long x2 asm("x2") = c;
  register long x3 asm("x3") = d;
  asm volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
  return x0;
#else
#error "the orphan guard program supports x86_64 and aarch64"
#endif
}

struct Record {
  int op;  // +1 watch, -1 forget
  int group;
};

constexpr int kMaxGroups = 1 << 16;
int groups[kMaxGroups];  // untouched pages cost nothing

}  // namespace

// The kernel enters _start with the stack 16-byte aligned, not as after a call.
#if defined(__x86_64__)
#define SGPU_ENTRY __attribute__((force_align_arg_pointer, noreturn))
#else
#define SGPU_ENTRY __attribute__((noreturn))
#endif

extern "C" SGPU_ENTRY void _start() {
  // Only sgpu's end ends the guard: the terminal's and a session's signals do not.
  struct {
    unsigned long handler, flags, restorer, mask;
  } ignore{1, 0, 0, 0};  // SIG_IGN
  constexpr int kIgnored[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGPIPE, SIGQUIT};
  for (int sig : kIgnored) sys(__NR_rt_sigaction, sig, reinterpret_cast<long>(&ignore), 0, 8);
  // Started from memory, its name would be a descriptor's number.
  sys(__NR_prctl, PR_SET_NAME, reinterpret_cast<long>("sgpu-guard"));
  int count = 0;
  Record rec{};
  for (;;) {
    long n = sys(__NR_read, 0, reinterpret_cast<long>(&rec), sizeof rec);
    if (n == sizeof rec) {
      if (rec.op > 0) {
        if (count < kMaxGroups) groups[count++] = rec.group;
      } else {
        for (int i = 0; i < count; ++i)
          if (groups[i] == rec.group) {
            groups[i] = groups[--count];
            break;
          }
      }
      continue;
    }
    if (n == -4) continue;  // EINTR
    break;                  // end of file: sgpu is gone, or done
  }
  for (int i = 0; i < count; ++i) sys(__NR_kill, -groups[i], SIGKILL);
  sys(__NR_exit_group, 0);
  __builtin_unreachable();
}
