#include "sgpu/launcher/process/orphan_guard.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "process/spawn.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/process/orphan_reaper.hpp"

namespace sgpu::launcher {

// orphan_guard_image.cpp, generated: the executable of orphan_guard_program.cpp (empty where it is not built).
extern const unsigned char kOrphanGuardImage[];
extern const std::size_t kOrphanGuardImage_size;

namespace {

struct Record {
  int op;  // +1 watch, -1 forget, +2 a marker of n bytes follows, +3 an orderly end
  pid_t group;
};

// Starts the guard's own program from memory with `pipe` as its standard
// input; -1 when it cannot (no image for this machine, memfd or exec
// refused, e.g. vm.memfd_noexec=2): the caller forks instead.
pid_t spawn_program(int pipe) {
  if (kOrphanGuardImage_size == 0) return -1;
#ifdef MFD_EXEC
  int image = ::memfd_create("sgpu-orphan-guard", MFD_CLOEXEC | MFD_EXEC);
  if (image < 0 && errno == EINVAL) image = ::memfd_create("sgpu-orphan-guard", MFD_CLOEXEC);  // before Linux 6.3
#else
  int image = ::memfd_create("sgpu-orphan-guard", MFD_CLOEXEC);
#endif
  if (image < 0) return -1;
  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  pid_t pid = -1;
  if (devnull >= 0 &&
      ::write(image, kOrphanGuardImage, kOrphanGuardImage_size) == static_cast<ssize_t>(kOrphanGuardImage_size)) {
    const char* argv[] = {"sgpu-guard", nullptr};
    const char* envp[] = {nullptr};
    SpawnRequest req;
    req.path = "sgpu-guard";
    req.exec_fd = image;
    req.argv = argv;
    req.envp = envp;
    req.stdio[0] = pipe;
    req.stdio[1] = devnull;
    req.stdio[2] = devnull;
    // No parent-death signal: the guard must outlive sgpu, to act when sgpu dies.
    try {
      auto child = spawn_process(req);
      ::close(child.pidfd);
      pid = child.pid;
    } catch (const std::system_error&) {
    }
  }
  if (devnull >= 0) ::close(devnull);
  ::close(image);
  return pid;
}

[[noreturn]] void guardian_main(int fd) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGPIPE, SIGQUIT}) ::signal(sig, SIG_IGN);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::setpgid(0, 0);  // out of the terminal's foreground group
  // Hold nothing of sgpu's: no pipe of a rank, no terminal, no socket.
  int devnull = ::open("/dev/null", O_RDWR);
  for (int target = 0; target <= 2; ++target) {
    if (devnull >= 0)
      ::dup2(devnull, target);
    else
      ::close(target);  // no /dev/null (a bare chroot): closed rather than sgpu's
  }
  ::dup2(fd, 3);
  ::close_range(4, ~0U, 0);
  std::vector<pid_t> groups;
  Record rec{};
  for (;;) {
    ssize_t n = ::read(3, &rec, sizeof rec);
    if (n == static_cast<ssize_t>(sizeof rec)) {
      if (rec.op == 2) {  // this copy of sgpu does not look for the run's escapees: skip the marker
        char skip[256];
        if (rec.group <= 0 || rec.group > static_cast<pid_t>(sizeof skip) || ::read(3, skip, rec.group) != rec.group)
          break;
        continue;
      }
      if (rec.op == 3) continue;
      if (rec.op > 0)
        groups.push_back(rec.group);
      else
        std::erase(groups, rec.group);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // end of file: sgpu is gone, or done
  }
  for (pid_t g : groups) ::kill(-g, SIGKILL);
  ::_exit(0);
}

}  // namespace

OrphanGuard::OrphanGuard() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    throw Error(fmt::format("cannot create the orphan guard's pipe: {}", std::strerror(errno)), 1);
  guardian_ = spawn_program(p[0]);
  if (guardian_ < 0) {
    guardian_ = ::fork();  // a copy of sgpu, more memory: only where the program cannot start
    if (guardian_ > 0) note_own_child(guardian_);
  }
  if (guardian_ < 0) {
    int err = errno;
    ::close(p[0]);
    ::close(p[1]);
    throw Error(fmt::format("cannot fork the orphan guard: {}", std::strerror(err)), 1);
  }
  if (guardian_ == 0) {
    ::close(p[1]);
    guardian_main(p[0]);
  }
  ::close(p[0]);
  fd_ = p[1];
}

OrphanGuard::~OrphanGuard() {
  // sgpu ends in order: its own sweep (kill_adopted_orphans) takes what escaped.
  if (fd_ >= 0) send(3, 0);
  if (fd_ >= 0) ::close(fd_);
  if (guardian_ > 0) {
    while (::waitpid(guardian_, nullptr, 0) < 0 && errno == EINTR) {
    }
    forget_own_child(guardian_);
  }
}

void OrphanGuard::send(int op, pid_t process_group) {
  Record rec{op, process_group};
  // 8 bytes: below PIPE_BUF, so one write is atomic; the guardian drains at once.
  while (::write(fd_, &rec, sizeof rec) < 0 && errno == EINTR) {
  }
}

void OrphanGuard::watch(pid_t process_group) { send(+1, process_group); }

void OrphanGuard::mark(std::string_view entry) {
  if (entry.empty() || entry.size() >= 256) return;
  // Header and text in one write, below PIPE_BUF: atomic.
  char message[sizeof(Record) + 256];
  Record rec{2, static_cast<pid_t>(entry.size())};
  std::memcpy(message, &rec, sizeof rec);
  std::memcpy(message + sizeof rec, entry.data(), entry.size());
  while (::write(fd_, message, sizeof rec + entry.size()) < 0 && errno == EINTR) {
  }
}
void OrphanGuard::forget(pid_t process_group) { send(-1, process_group); }

}  // namespace sgpu::launcher
