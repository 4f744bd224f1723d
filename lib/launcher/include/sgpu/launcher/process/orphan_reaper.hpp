#pragma once
// Nothing a job starts outlives sgpu, not even a daemon that left its rank's
// process group (setsid, a double fork). sgpu makes itself the "child
// subreaper" of its descendants at start (PR_SET_CHILD_SUBREAPER): a process
// whose parent exits is then re-parented to sgpu instead of to init. When the
// job is over and sgpu has reaped every child it started itself, each child
// still in another session than sgpu's is such an adopted orphan (ranks run in
// sessions of their own, so all they start is outside sgpu's; what sgpu starts
// itself stays in its session, e.g. a salloc left to release its allocation);
// sgpu kills and reaps it, and again for what re-parents when those die,
// until none is left.
//
// The limit: a SIGKILLed sgpu cannot do this, so its adopted orphans move on
// to init (the ranks' own process groups are still killed by OrphanGuard).
// An ssh ControlPersist master (its title ends in " [mux]") is left alone:
// it is meant to outlast the run and serve the next one.
#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

namespace sgpu::launcher {

// PR_SET_CHILD_SUBREAPER on this process; false if the kernel refused.
bool become_subreaper();

struct KilledOrphan {
  pid_t pid = 0;
  std::string command;  // its /proc comm, e.g. "sleep"
};

// Kills (SIGKILL) and reaps every child of this process outside its session,
// repeatedly, as long as new ones appear (bounded). Call it when the job is
// over.
std::vector<KilledOrphan> kill_adopted_orphans();

// Whether a /proc cmdline (NUL-separated) is an ssh ControlPersist master.
bool is_ssh_control_master(std::string_view cmdline);

}  // namespace sgpu::launcher
