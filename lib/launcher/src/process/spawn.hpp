#pragma once
// Starting a child without fork's cost: clone(CLONE_VM), as posix_spawn
// does, so nothing of sgpu's memory or event loop is copied and the time to
// start a rank does not grow with the ranks already running. posix_spawn
// itself cannot set PR_SET_PDEATHSIG, hence this. Unlike posix_spawn's
// CLONE_VFORK, start_spawn does not sleep while the child sets itself up and
// execs: a batch of ranks exec beside sgpu and beside each other, as a
// shell's `&` does, and settle_spawns() then waits for them all. Internal to
// lib/launcher.
#include <sys/resource.h>
#include <sys/types.h>
#include <csignal>
#include <cstddef>

namespace sgpu::launcher {

struct SpawnRequest {
  const char* path = nullptr;          // absolute
  int exec_fd = -1;                    // >= 0: exec this open file instead (fexecve), `path` only names it
  const char* const* argv = nullptr;   // argv[0] included, null-terminated
  const char* const* envp = nullptr;   // "NAME=value", null-terminated
  const char* cwd = nullptr;           // nullptr: sgpu's own
  int stdio[3] = {-1, -1, -1};         // the child's fds 0, 1, 2
  pid_t parent = 0;                    // PR_SET_PDEATHSIG(SIGKILL) tied to this pid; 0: none
  bool new_session = true;             // false: a process group of its own in sgpu's session
  const rlimit* open_files = nullptr;  // RLIMIT_NOFILE to give the child (sgpu's before raising it)
  // The signals the child must set back to their default (caught_signals()),
  // for a batch of spawns; nullptr: spawn_process reads them for this one.
  const sigset_t* caught = nullptr;
  // --cpu-bind, both made before the clone: the child's CPUs (a cpu_set_t of
  // `cpus_size` bytes), and the NUMA nodes its memory prefers (a bitmask of
  // `numa_bits` bits, MPOL_PREFERRED). nullptr: inherited.
  const void* cpus = nullptr;
  std::size_t cpus_size = 0;
  const unsigned long* numa_nodes = nullptr;
  unsigned long numa_bits = 0;
};

struct Spawned {
  pid_t pid = -1;
  int pidfd = -1;  // owned by the caller
};

// Starts the child in its own session (or only its own process group) with
// every other fd closed, all signals unblocked and at their defaults
// (SIGPIPE included); returns once it has exec'd. Throws std::system_error with the errno of the step that
// failed (chdir, exec: ENOENT, EACCES...), the child then reaped.
Spawned spawn_process(const SpawnRequest& request);

// Starts the child as spawn_process does, but returns as soon as it is
// cloned, its pid and pidfd valid, while it sets itself up and execs. Until
// settle_spawns() returns, the request, all it points to and `*exec_error`
// must stay alive and unchanged, and the child may not be in its own session
// yet (signal it by its pidfd, not its group). Then `*exec_error` holds the
// errno of the step that failed (the child has exited 127 and is the
// caller's to reap) or 0: it exec'd. Throws std::system_error when the clone
// itself fails. Where the child's code cannot avoid errno (an architecture
// other than x86_64 and aarch64), it returns once the child has exec'd.
Spawned start_spawn(const SpawnRequest& request, int* exec_error);

// Waits until every child start_spawn started has exec'd or failed.
void settle_spawns();

// The signals a child must reset before exec: those with a handler of
// sgpu's now, and SIGPIPE when ignored (only sgpu ignores it). Valid while
// no handler changes: a batch of spawns on the loop.
sigset_t caught_signals();

}  // namespace sgpu::launcher
