#include <sys/wait.h>
#include <unistd.h>
#include <csignal>
#include <string>

#include <doctest/doctest.h>

#include "sgpu/launcher/process/orphan_reaper.hpp"

using namespace sgpu::launcher;

TEST_CASE("launcher::is_ssh_control_master") {
  using namespace std::string_literals;
  struct Row {
    const char* what;
    std::string cmdline;
    bool master;
  };
  const Row rows[] = {
      {"ControlPersist master", "ssh: /home/u/.ssh/sgpu-abc [mux]\0"s, true},
      {"without the trailing NUL", "ssh: /tmp/cm [mux]", true},
      {"a plain ssh client", "ssh\0-o\0ControlMaster=auto\0host\0"s, false},
      {"a rank's daemon", "sleep\0300\0"s, false},
      {"a mux title not from ssh", "python3\0x [mux]\0"s, false},
      {"empty (a zombie)", "", false},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.what));
    CHECK(is_ssh_control_master(row.cmdline) == row.master);
  }
}

namespace {
// A child in a session of its own (as a rank's escaped daemon is) that exits at once.
pid_t exited_child_in_another_session(int code) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();
    ::_exit(code);
  }
  siginfo_t info{};
  ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT);  // exited, not reaped
  return pid;
}
}  // namespace

TEST_CASE("launcher::reap_exited_orphans") {
  SUBCASE("an exited child no one waits for is reaped") {
    pid_t orphan = exited_child_in_another_session(0);
    CHECK(reap_exited_orphans() >= 1);
    CHECK(::waitpid(orphan, nullptr, WNOHANG) == -1);  // gone: ECHILD
  }
  SUBCASE("an own child's status is left for its owner, and orphans behind it are still reaped") {
    pid_t rank = exited_child_in_another_session(7);
    note_own_child(rank);
    pid_t orphan = exited_child_in_another_session(0);
    reap_exited_orphans();
    CHECK(::waitpid(orphan, nullptr, WNOHANG) == -1);
    int status = 0;
    CHECK(::waitpid(rank, &status, WNOHANG) == rank);
    CHECK(WEXITSTATUS(status) == 7);
    forget_own_child(rank);
  }
  SUBCASE("a child in this process's session is left alone (Boost.Process's: ssh, srun)") {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(3);
    siginfo_t info{};
    ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT);
    reap_exited_orphans();
    int status = 0;
    CHECK(::waitpid(pid, &status, WNOHANG) == pid);
    CHECK(WEXITSTATUS(status) == 3);
  }
}

TEST_CASE("launcher::reap_before_exit: the sweep waits for the child, and never kills or reports it") {
  // A guardian told to end: in a session of its own, it takes a while to exit after end of file.
  int go[2];
  REQUIRE(::pipe(go) == 0);
  pid_t guardian = ::fork();
  if (guardian == 0) {
    ::setsid();
    ::close(go[1]);
    char byte = 0;
    (void)::read(go[0], &byte, 1);
    ::usleep(200 * 1000);
    ::_exit(0);
  }
  ::close(go[0]);
  note_own_child(guardian);
  reap_before_exit(guardian);
  ::close(go[1]);                     // told to end: still running for 200 ms
  CHECK(reap_exited_orphans() == 0);  // an own child until the sweep
  auto killed = kill_adopted_orphans();
  CHECK(killed.empty());                               // waited for, not killed as an orphan
  CHECK(::waitpid(guardian, nullptr, WNOHANG) == -1);  // reaped: ECHILD
}
