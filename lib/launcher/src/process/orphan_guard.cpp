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
#include <utility>
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

}  // namespace

// The guardian's program starting from memory, with the pipe's read end as
// its standard input: what start_spawn reads until the child has exec'd.
struct OrphanGuard::Program {
  const char* argv[2] = {"sgpu-guard", nullptr};
  const char* envp[1] = {nullptr};
  SpawnRequest request;
  int exec_error = 0;
  Spawned child;

  // nullptr where it cannot start (no image for this machine, memfd refused,
  // e.g. vm.memfd_noexec=2): the caller forks instead.
  static std::unique_ptr<Program> start(int pipe) {
    if (kOrphanGuardImage_size == 0) return nullptr;
#ifdef MFD_EXEC
    int image = ::memfd_create("sgpu-orphan-guard", MFD_CLOEXEC | MFD_EXEC);
    if (image < 0 && errno == EINVAL) image = ::memfd_create("sgpu-orphan-guard", MFD_CLOEXEC);  // before Linux 6.3
#else
    int image = ::memfd_create("sgpu-orphan-guard", MFD_CLOEXEC);
#endif
    if (image < 0) return nullptr;
    int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    std::unique_ptr<Program> program;
    if (devnull >= 0 &&
        ::write(image, kOrphanGuardImage, kOrphanGuardImage_size) == static_cast<ssize_t>(kOrphanGuardImage_size)) {
      program = std::make_unique<Program>();
      auto& req = program->request;
      req.path = "sgpu-guard";
      req.exec_fd = image;
      req.argv = program->argv;
      req.envp = program->envp;
      req.stdio[0] = pipe;
      req.stdio[1] = devnull;
      req.stdio[2] = devnull;
      // No parent-death signal: the guard must outlive sgpu, to act when sgpu dies.
      try {
        program->child = start_spawn(req, &program->exec_error);
      } catch (const std::system_error&) {
        program.reset();
      }
    }
    // The child has its own copies of these (start_spawn): closed here at once.
    if (devnull >= 0) ::close(devnull);
    ::close(image);
    return program;
  }
};

namespace {

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

OrphanGuard::OrphanGuard() = default;

void OrphanGuard::start() {
  if (fd_ >= 0) return;
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0)
    throw Error(fmt::format("cannot create the orphan guard's pipe: {}", std::strerror(errno)), 1);
  fd_ = p[1];
  read_end_ = p[0];
  program_ = Program::start(p[0]);
  if (program_) {
    guardian_ = program_->child.pid;
    return;
  }
  try {
    fork_guardian();
  } catch (...) {
    ::close(std::exchange(read_end_, -1));
    ::close(std::exchange(fd_, -1));
    throw;
  }
}

// A copy of sgpu, more memory: only where the program cannot start.
void OrphanGuard::fork_guardian() {
  guardian_ = ::fork();
  if (guardian_ < 0) throw Error(fmt::format("cannot fork the orphan guard: {}", std::strerror(errno)), 1);
  if (guardian_ == 0) {
    ::close(fd_);
    guardian_main(read_end_);
  }
  note_own_child(guardian_);
  ::close(std::exchange(read_end_, -1));
}

// Waits for the program's start; false when its exec failed (the child,
// which exited 127, reaped). Either way the program's request may go.
bool OrphanGuard::settle_program() {
  settle_spawns();  // at once when the ranks' start settled it already
  ::close(program_->child.pidfd);
  int error = program_->exec_error;
  program_.reset();
  if (error == 0) return true;
  while (::waitpid(guardian_, nullptr, 0) < 0 && errno == EINTR) {
  }
  forget_own_child(guardian_);
  guardian_ = -1;
  return false;
}

void OrphanGuard::confirm() {
  if (!program_) return;
  if (settle_program())
    ::close(std::exchange(read_end_, -1));
  else
    fork_guardian();  // reads what was sent so far from the pipe
}

OrphanGuard::~OrphanGuard() {
  if (program_) settle_program();  // never confirmed: no rank was watched
  if (read_end_ >= 0) ::close(read_end_);
  // sgpu ends in order: its own sweep (kill_adopted_orphans) takes what escaped.
  if (fd_ >= 0) send(3, 0);
  if (fd_ >= 0) ::close(fd_);
  if (guardian_ > 0) reap_before_exit(guardian_);
}

void OrphanGuard::send(int op, pid_t process_group) {
  Record rec{op, process_group};
  // 8 bytes: below PIPE_BUF, so one write is atomic; the guardian drains at once.
  while (::write(fd_, &rec, sizeof rec) < 0 && errno == EINTR) {
  }
}

void OrphanGuard::watch(pid_t process_group) {
  start();
  confirm();
  send(+1, process_group);
}

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
