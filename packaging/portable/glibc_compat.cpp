// Definitions of what glibc_compat.h declares, for the portable build only
// (see there). Both are async-signal-safe: close_range runs in a child
// between clone and exec.
#include "glibc_compat.h"

#include <cerrno>
#include <csignal>
#include <cstddef>
#include <cstdint>

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

namespace {

struct Dirent64 {
  std::uint64_t ino;
  std::int64_t off;
  unsigned short reclen;
  unsigned char type;
  char name[1];
};

// What glibc's closefrom does without close_range: list /proc/self/fd with
// getdents64 into a stack buffer (no allocation), close what is in range,
// and list again from the start until a pass closes nothing.
int close_listed(unsigned first, unsigned last) {
  int dir = static_cast<int>(::syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir < 0) return -1;
  alignas(8) char buf[4096];
  for (;;) {
    bool closed = false;
    long n;
    while ((n = ::syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
      for (long at = 0; at < n;) {
        const auto* entry = reinterpret_cast<const Dirent64*>(buf + at);
        at += entry->reclen;
        unsigned fd = 0;
        const char* c = entry->name;
        if (*c < '0' || *c > '9') continue;
        for (; *c >= '0' && *c <= '9'; ++c) fd = fd * 10 + static_cast<unsigned>(*c - '0');
        if (fd >= first && fd <= last && static_cast<int>(fd) != dir) {
          ::close(static_cast<int>(fd));
          closed = true;
        }
      }
    }
    if (n < 0 || !closed || ::lseek(dir, 0, SEEK_SET) != 0) break;
  }
  ::close(dir);
  return 0;
}

}  // namespace

extern "C" int close_range(unsigned int first, unsigned int last, int flags) noexcept {
  long rc = ::syscall(SYS_close_range, first, last, flags);
  if (rc == 0 || errno != ENOSYS) return static_cast<int>(rc);
  if (first > last || (static_cast<unsigned>(flags) & ~CLOSE_RANGE_UNSHARE) != 0) {
    errno = EINVAL;
    return -1;
  }
  if ((static_cast<unsigned>(flags) & CLOSE_RANGE_UNSHARE) != 0 && ::unshare(CLONE_FILES) != 0) return -1;
  return close_listed(first, last);
}

#if __GLIBC_MINOR__ < 32
extern "C" const char* sigabbrev_np(int sig) noexcept {
  // Linux's numbering on x86_64 and aarch64, with glibc's names.
  static const char* const names[] = {
      nullptr, "HUP",  "INT",    "QUIT", "ILL",  "TRAP", "ABRT", "BUS",  "FPE",  "KILL",  "USR1",
      "SEGV",  "USR2", "PIPE",   "ALRM", "TERM", "STKFLT", "CHLD", "CONT", "STOP", "TSTP",  "TTIN",
      "TTOU",  "URG",  "XCPU",   "XFSZ", "VTALRM", "PROF", "WINCH", "IO",  "PWR",  "SYS"};
  if (sig <= 0 || static_cast<std::size_t>(sig) >= sizeof names / sizeof names[0]) return nullptr;
  return names[sig];
}
#endif

// libm's modff, for the one caller the portable binary has: hwloc's import of
// an XML topology of format 1 (topology-xml.c), which sgpu never reads. With
// it defined here, the binary needs no libm.so (format_duration rounds by
// hand for the same reason): one library fewer to load at every start, and
// 330 KiB less of a launch's peak RSS. The same results as glibc's for every
// float: integral values (2^23 and up), infinities and NaNs, and signed zeros.
extern "C" float modff(float x, float* integral) noexcept {
  if (!(__builtin_fabsf(x) < 8388608.0F)) {  // 2^23 or more: no fraction; or NaN
    *integral = x;
    return x != x ? x : __builtin_copysignf(0.0F, x);
  }
  float whole = __builtin_copysignf(static_cast<float>(static_cast<std::int32_t>(x)), x);
  *integral = whole;
  return __builtin_copysignf(x - whole, x);
}
