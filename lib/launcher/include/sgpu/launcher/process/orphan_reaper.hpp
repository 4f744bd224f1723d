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
// While the job runs, adopted orphans are reaped as they die (AdoptedReaper,
// on SIGCHLD), so short-lived ones never pile up as zombies; only the live
// ones are left for the sweep at the end. A child sgpu waits for itself (a
// rank, by its pidfd; the guard) is never reaped there: spawn_process notes
// it (note_own_child) until its owner has its status, and children in sgpu's
// own session (what ChildProcess starts: ssh, srun, salloc) are left to
// their owners.
//
// A SIGKILLed sgpu cannot do this, and its adopted orphans move on to init;
// OrphanGuard then kills the ranks' groups, and every process that carries
// the run's markers in its environment (orphan_guard.hpp).
// An ssh ControlPersist master (its title ends in " [mux]") is left alone:
// it is meant to outlast the run and serve the next one.
#include <sys/types.h>

#include <cstddef>
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

// Waits for the children given to reap_before_exit(), then kills (SIGKILL)
// and reaps every child of this process outside its session, repeatedly, as
// long as new ones appear (bounded). Call it when the job is over.
std::vector<KilledOrphan> kill_adopted_orphans();

// Children this process waits for itself (the SIGCHLD reaper leaves them
// alone). Thread-safe.
void note_own_child(pid_t pid);
void forget_own_child(pid_t pid);

// An own child that was told to end and need not be waited for now (the
// orphan guard): kill_adopted_orphans() waits for it first, and it stays an
// own child until then. Those that ended by the next call are reaped then.
void reap_before_exit(pid_t pid);

// Reaps every child that has exited, is not an own child and is outside
// this process's session (an adopted orphan); returns how many. Never blocks.
std::size_t reap_exited_orphans();

// Whether a /proc cmdline (NUL-separated) is an ssh ControlPersist master.
bool is_ssh_control_master(std::string_view cmdline);

}  // namespace sgpu::launcher
