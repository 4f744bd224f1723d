// The orphan guard's own program (orphan_guard.hpp), built freestanding: no
// libc, no C++ runtime, system calls only, so the process that waits beside
// every run takes a few pages instead of a copy of sgpu (12 KiB against
// 2.3 MiB of peak RSS). sgpu embeds the executable and starts it from
// memory. Standard input is the pipe from sgpu: 8-byte records, {+1, group}
// to watch a rank's process group, {-1, group} to forget it, {+2, n} then n
// bytes: a "NAME=value" every process of the run has in its environment (the
// run's id, the node's rank), {+3, 0}: sgpu is ending in order, its own sweep
// does the rest. At end of file (sgpu exited, however) every group still
// watched gets SIGKILL; unless sgpu said +3, so did every process whose
// environment holds all the markers: what escaped the ranks' groups and
// sessions (setsid, a double fork) and now belongs to init. The
// environment is the one mark such a process keeps (Jenkins finds a build's
// daemons by the same means).
#include <asm/unistd.h>
#include <linux/fcntl.h>
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

constexpr int kMaxMarkers = 4;
constexpr int kMaxMarker = 256;
char markers[kMaxMarkers][kMaxMarker];
int marker_length[kMaxMarkers];
int marker_count = 0;

char buffer[16384];

bool read_exactly(char* out, int n) {
  while (n > 0) {
    long got = sys(__NR_read, 0, reinterpret_cast<long>(out), n);
    if (got == -4) continue;  // EINTR
    if (got <= 0) return false;
    out += got;
    n -= static_cast<int>(got);
  }
  return true;
}

// Whether the NUL-separated environment on `fd` holds every marker as a
// whole entry. Streams the entries: no limit on the environment's size.
bool environment_matches(int fd) {
  bool found[kMaxMarkers] = {};
  int pos = 0;
  unsigned alive = (1U << marker_count) - 1;  // markers the current entry still matches
  for (;;) {
    long n = sys(__NR_read, fd, reinterpret_cast<long>(buffer), sizeof buffer);
    if (n == -4) continue;
    if (n <= 0) break;
    for (long i = 0; i < n; ++i) {
      char c = buffer[i];
      for (int m = 0; m < marker_count; ++m) {
        if (c == 0 && (alive & (1U << m)) && pos == marker_length[m]) found[m] = true;
        if (c != 0 && (pos >= marker_length[m] || markers[m][pos] != c)) alive &= ~(1U << m);
      }
      if (c == 0) {
        pos = 0;
        alive = (1U << marker_count) - 1;
      } else {
        ++pos;
      }
    }
  }
  for (int m = 0; m < marker_count; ++m)
    if (!found[m]) return false;
  return true;
}

// SIGKILL to every process whose environment matches; how many there were.
int kill_marked() {
  int proc =
      static_cast<int>(sys(__NR_openat, AT_FDCWD, reinterpret_cast<long>("/proc"), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (proc < 0) return 0;
  const long self = sys(__NR_getpid);
  int killed = 0;
  static char entries[8192];
  for (;;) {
    long n = sys(__NR_getdents64, proc, reinterpret_cast<long>(entries), sizeof entries);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[]
      const char* entry = entries + off;
      unsigned short reclen = *reinterpret_cast<const unsigned short*>(entry + 16);
      const char* name = entry + 19;
      off += reclen;
      long pid = 0;
      int digits = 0;
      for (; name[digits] >= '0' && name[digits] <= '9'; ++digits) pid = pid * 10 + (name[digits] - '0');
      if (digits == 0 || name[digits] != 0 || pid <= 1 || pid == self) continue;
      char path[64];
      int len = 0;
      for (const char* p = name; *p; ++p) path[len++] = *p;
      for (const char* p = "/environ"; *p; ++p) path[len++] = *p;
      path[len] = 0;
      int fd = static_cast<int>(sys(__NR_openat, proc, reinterpret_cast<long>(path), O_RDONLY | O_CLOEXEC));
      if (fd < 0) continue;  // gone, or another user's
      bool marked = environment_matches(fd);
      sys(__NR_close, fd);
      if (marked && sys(__NR_kill, pid, SIGKILL) == 0) ++killed;
    }
  }
  sys(__NR_close, proc);
  return killed;
}

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
  bool orderly = false;
  Record rec{};
  for (;;) {
    long n = sys(__NR_read, 0, reinterpret_cast<long>(&rec), sizeof rec);
    if (n == sizeof rec) {
      if (rec.op == 2) {
        static char skip[kMaxMarker];
        bool kept = marker_count < kMaxMarkers && rec.group > 0 && rec.group < kMaxMarker;
        char* into = kept ? markers[marker_count] : skip;
        if (rec.group <= 0 || rec.group >= kMaxMarker || !read_exactly(into, rec.group)) break;
        if (kept) marker_length[marker_count++] = rec.group;
      } else if (rec.op == 3) {
        orderly = true;
      } else if (rec.op > 0) {
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
  // Rounds: one killed while it forked leaves a child the next round sees.
  if (!orderly && marker_count > 0)
    for (int round = 0; round < 16 && kill_marked() > 0; ++round) {
    }
  sys(__NR_exit_group, 0);
  __builtin_unreachable();
}
