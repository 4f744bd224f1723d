#include "sgpu/launcher/process/orphan_reaper.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_set>

namespace sgpu::launcher {
namespace fs = std::filesystem;

namespace {

std::string read_small(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// This process's children: every thread's /proc children list.
std::set<pid_t> children() {
  std::set<pid_t> out;
  std::error_code ec;
  for (const auto& task : fs::directory_iterator("/proc/self/task", ec)) {
    std::istringstream list(read_small(task.path() / "children"));
    pid_t pid = 0;
    while (list >> pid) out.insert(pid);
  }
  return out;
}

std::mutex own_children_mutex;
std::unordered_set<pid_t>& own_children() {
  static std::unordered_set<pid_t> pids;
  return pids;
}

bool is_own_child(pid_t pid) {
  std::lock_guard lock(own_children_mutex);
  return own_children().contains(pid);
}

// An adopted orphan: not a child sgpu waits for itself, and not in sgpu's
// session (where ChildProcess's children and what they leave live).
bool adopted(pid_t pid, pid_t own_session) { return !is_own_child(pid) && ::getsid(pid) != own_session; }

bool reap(pid_t pid) {
  pid_t got = 0;
  while ((got = ::waitpid(pid, nullptr, WNOHANG)) < 0 && errno == EINTR) {
  }
  return got == pid;
}

std::vector<pid_t>& ending_children() {
  static std::vector<pid_t> pids;
  return pids;
}

void wait_for(pid_t pid) {
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

void reap_before_exit(pid_t pid) {
  std::lock_guard lock(own_children_mutex);
  auto& ending = ending_children();
  std::erase_if(ending, [](pid_t earlier) {
    if (!reap(earlier)) return false;
    own_children().erase(earlier);
    return true;
  });
  ending.push_back(pid);
}

void note_own_child(pid_t pid) {
  std::lock_guard lock(own_children_mutex);
  own_children().insert(pid);
}

void forget_own_child(pid_t pid) {
  std::lock_guard lock(own_children_mutex);
  own_children().erase(pid);
}

std::size_t reap_exited_orphans() {
  const pid_t own_session = ::getsid(0);
  std::size_t reaped = 0;
  // Fast path: peek (WNOWAIT) at an exited child and reap it while it is an
  // orphan. An own child's status must stay for its owner, and a peek cannot
  // see past it: then look at each child in turn.
  for (;;) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return reaped;
    if (!adopted(info.si_pid, own_session)) break;
    if (!reap(info.si_pid)) break;
    ++reaped;
  }
  for (pid_t pid : children())
    if (adopted(pid, own_session) && reap(pid)) ++reaped;
  return reaped;
}

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

bool is_ssh_control_master(std::string_view cmdline) {
  while (!cmdline.empty() && cmdline.back() == '\0') cmdline.remove_suffix(1);
  return cmdline.starts_with("ssh: ") && cmdline.ends_with(" [mux]");
}

std::vector<KilledOrphan> kill_adopted_orphans() {
  {
    std::lock_guard lock(own_children_mutex);
    for (pid_t pid : ending_children()) {
      wait_for(pid);
      own_children().erase(pid);
    }
    ending_children().clear();
  }
  std::vector<KilledOrphan> killed;
  std::set<pid_t> spared;
  const pid_t own_session = ::getsid(0);
  // Each round kills the orphans there are; what they leave re-parents to sgpu
  // for the next round. A bound, so that a fork bomb cannot hold sgpu forever.
  for (int round = 0; round < 64; ++round) {
    std::vector<pid_t> targets;
    for (pid_t pid : children()) {
      if (spared.contains(pid)) continue;
      auto proc = fs::path("/proc") / std::to_string(pid);
      // In sgpu's own session: a child sgpu started itself and let go on purpose (salloc releasing its
      // allocation). Ranks run in sessions of their own, so what they leave is never in this one.
      if (::getsid(pid) == own_session || is_ssh_control_master(read_small(proc / "cmdline"))) {
        spared.insert(pid);
        continue;
      }
      auto comm = read_small(proc / "comm");
      while (!comm.empty() && comm.back() == '\n') comm.pop_back();
      // A zombie is already dead: reaped below, not reported as killed.
      auto stat = read_small(proc / "stat");
      auto close = stat.rfind(')');
      bool zombie = close != std::string::npos && stat.compare(close, 3, ") Z") == 0;
      if (!zombie && ::kill(pid, SIGKILL) == 0) killed.push_back({pid, comm});
      targets.push_back(pid);
    }
    if (targets.empty()) break;
    for (pid_t pid : targets) wait_for(pid);
  }
  return killed;
}

}  // namespace sgpu::launcher
