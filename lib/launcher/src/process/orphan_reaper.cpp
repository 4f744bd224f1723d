#include "sgpu/launcher/process/orphan_reaper.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

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

}  // namespace

bool become_subreaper() { return ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0; }

bool is_ssh_control_master(std::string_view cmdline) {
  while (!cmdline.empty() && cmdline.back() == '\0') cmdline.remove_suffix(1);
  return cmdline.starts_with("ssh: ") && cmdline.ends_with(" [mux]");
}

std::vector<KilledOrphan> kill_adopted_orphans() {
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
    for (pid_t pid : targets)
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
  }
  return killed;
}

}  // namespace sgpu::launcher
