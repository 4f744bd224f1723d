#pragma once
// What every child sgpu starts (ranks, ssh clients, srun, salloc) gets
// between fork and exec, as a Boost.Process v2 initializer, and its
// environment in the form exec wants. Internal to lib/launcher.
#include <linux/close_range.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <csignal>
#include <string>
#include <vector>

#include <boost/process/v2/process.hpp>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

// Runs in the child between fork and exec: only async-signal-safe calls.
struct ChildExecSetup {
  // sgpu's pid: the child is killed when sgpu dies (PR_SET_PDEATHSIG). 0 for
  // a child that must outlive a killed sgpu (salloc, to release the job).
  pid_t parent = 0;
  // A session of its own (ranks), not only a process group: with no
  // controlling terminal, a rank that reads the terminal (getpass, input())
  // fails at once instead of being stopped by SIGTTIN for good.
  bool new_session = false;

  template <typename Launcher>
  boost::process::v2::error_code on_exec_setup(Launcher&, const boost::process::v2::filesystem::path&,
                                               const char* const*) const {
    // Own group: the terminal's Ctrl-C reaches sgpu, which decides what to pass on.
    if (!new_session || ::setsid() < 0) ::setpgid(0, 0);
    // Only 0, 1 and 2 cross exec. Boost.Process leaves the descriptors of the
    // stdio bindings (/dev/null, the pipes' write ends) open in the child;
    // a daemon holding a copy of a rank's pipe keeps sgpu reading it. Marked
    // close-on-exec rather than closed: the launcher's exec-error pipe must
    // stay usable until exec.
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    if (parent != 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(128 + SIGKILL);  // sgpu died before prctl took effect
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);  // sgpu ignores SIGPIPE; children get the default back
    return {};
  }
};

// "NAME=value" strings for exec.
inline std::vector<std::string> environment_strings(const env::Environment& environment) {
  std::vector<std::string> out;
  out.reserve(environment.size());
  for (const auto& [k, v] : environment) out.push_back(k + "=" + v);
  return out;
}

}  // namespace sgpu::launcher
