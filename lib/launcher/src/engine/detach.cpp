#include "engine/detach.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/outputs/summary.hpp"
#include "sgpu/launcher/runs/run_state.hpp"

namespace sgpu::launcher {

namespace {
[[noreturn]] void fail(const std::string& what) {
  throw Error(fmt::format("--detach: {}: {}", what, std::strerror(errno)), 1);
}

// The child's side of the hand-over: one byte, 0 for ready, else the errno.
void report_to_parent(int fd, unsigned char code) {
  while (::write(fd, &code, 1) < 0 && errno == EINTR) {
  }
  ::close(fd);
}

// The background run ended before it was listed: what it said (its console)
// goes to the caller's stderr; a console it could not write (a full disk)
// is named, with the code, rather than left silent. With -o json the caller
// prints the run's document on its own stdout (the console went to stderr).
void tell_why_not_started(const std::string& run_id, const std::string& run_dir, int code, bool json) {
  auto path = std::filesystem::path(run_dir) / kRunConsoleFile;
  std::string said;
  if (std::ifstream console{path}) said.assign(std::istreambuf_iterator<char>(console), {});
  auto why = fmt::format("--detach: the background run ended (exit code {}) before it started", code);
  if (!said.empty()) {
    diagnostic(said);
  } else {
    why += fmt::format(", and {} holds no message (is its disk full?)", path.string());
    diagnostic("sgpu: error: {}\n", why);
  }
  if (!json) return;
  env::JobEnd end;
  end.kind = env::JobEnd::Kind::NotStarted;
  end.reason = why;
  end.cause_code = code;
  output(dump_json(not_started_json(run_id, run_dir, end)));
}

// The caller returns once the run is one `sgpu status` can see: its
// state.json exists. If the child ends first (it failed to start the run),
// its console goes to the caller's stderr and its exit code is the caller's.
// `watch` was made before the fork, so that the child holds it too: the last
// close of an inotify instance waits for an SRCU grace period (6-16 ms,
// measured), which this process would pay before its exit; the child's
// copy, closed with exec's close-on-exec in no rank and with the run's end,
// makes this one a mere reference dropped.
void wait_until_listed(pid_t child, int watch, const std::string& run_id, const std::string& run_dir, bool json) {
  auto state = std::filesystem::path(run_dir) / kRunStateFile;
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
  if (pidfd < 0) fail("cannot watch the background run");
  std::array<char, 4096> events{};
  while (!std::filesystem::exists(state)) {
    pollfd fds[2] = {{watch, POLLIN, 0}, {pidfd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      fail("poll");
    }
    if (fds[0].revents & POLLIN) (void)!::read(watch, events.data(), events.size());
    if ((fds[1].revents & POLLIN) && !std::filesystem::exists(state)) {
      int status = 0;
      ::waitpid(child, &status, 0);
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      tell_why_not_started(run_id, run_dir, code, json);
      ::_exit(exit_code_after_output(code));
    }
  }
  ::close(watch);
  ::close(pidfd);
}
}  // namespace

void detach_run(const std::string& run_id, const std::string& run_dir, bool json, const std::string& name) {
  auto console_path = (std::filesystem::path(run_dir) / kRunConsoleFile).string();
  int console = ::open(console_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (console < 0) fail("cannot create " + console_path);
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0) fail("cannot open /dev/null");
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) fail("pipe");
  int watch = ::inotify_init1(IN_CLOEXEC);
  if (watch < 0) fail("cannot watch the background run");
  if (::inotify_add_watch(watch, run_dir.c_str(), IN_MOVED_TO | IN_CREATE) < 0) fail("cannot watch " + run_dir);
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t child = ::fork();
  if (child < 0) fail("fork");
  if (child == 0) {
    ::close(ready[0]);
    unsigned char code = 0;
    if (::setsid() < 0 || ::dup2(null, 0) < 0 || ::dup2(console, 1) < 0 || ::dup2(console, 2) < 0)
      code = static_cast<unsigned char>(errno == 0 ? 1 : errno);
    ::close(null);
    ::close(console);
    report_to_parent(ready[1], code);
    if (code != 0) ::_exit(1);
    return;  // the launch goes on here, detached
  }
  ::close(ready[1]);
  ::close(null);
  ::close(console);
  unsigned char code = 1;
  ssize_t n = 0;
  while ((n = ::read(ready[0], &code, 1)) < 0 && errno == EINTR) {
  }
  if (n != 1 || code != 0) {
    ::waitpid(child, nullptr, 0);
    errno = n == 1 ? code : EPIPE;
    fail("cannot start the background run");
  }
  wait_until_listed(child, watch, run_id, run_dir, json);
  if (json) {
    nlohmann::ordered_json doc{{"run_id", run_id}, {"run_dir", run_dir}};
    if (!name.empty()) doc["name"] = name;
    output(doc.dump(2) + "\n");
  } else {
    output(run_id + "\n");
  }
  // Nothing of this process may tear down what the child now owns (the
  // reserved port, the run directory): leave without destructors.
  ::_exit(exit_code_after_output(0));
}

}  // namespace sgpu::launcher
