#pragma once
// Kills the ranks' process groups if sgpu dies, however it dies.
//
// PR_SET_PDEATHSIG only reaches a rank's first process; what that process
// started (data loader workers, `sh -c 'a & b'`) would outlive a SIGKILLed
// sgpu. So sgpu starts a small guardian at start, tells it each rank's process
// group through a pipe, and the guardian blocks in read(): when sgpu exits for
// any reason the pipe reaches end of file and the guardian SIGKILLs every
// group still registered. No polling, no signals. A process that leaves its
// group with setsid() or a double fork is beyond that, so sgpu also gives
// the guardian markers every process of the run carries in its environment (the run's
// id, the node's rank): when sgpu dies without ending in order (kill -9),
// the guardian SIGKILLs every process whose environment holds them all, as
// the ranks' daemons do unless they clear it. Where sgpu ends in order, its
// own sweep does that (orphan_reaper.hpp).
//
// The guardian is its own freestanding program (orphan_guard_program.cpp,
// embedded in sgpu and started from a memfd): a few pages, where a fork of
// sgpu held 2.3 MiB of peak RSS for the whole run. Where that program cannot
// start (another architecture, memfd exec forbidden), sgpu forks as before.
#include <sys/types.h>

#include <string_view>

namespace sgpu::launcher {

class OrphanGuard {
 public:
  OrphanGuard();   // starts the guardian; throws sgpu::Error if it cannot
  ~OrphanGuard();  // closes the pipe and reaps the guardian
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  void watch(pid_t process_group);
  // "NAME=value": an environment entry of every process of the run (at most
  // 4 markers, each under 256 bytes; the forked fallback ignores them).
  void mark(std::string_view entry);
  // The group's leader was reaped and its group killed: forget it, so a later
  // reuse of the number is never signalled.
  void forget(pid_t process_group);

 private:
  void send(int op, pid_t process_group);
  int fd_ = -1;
  pid_t guardian_ = -1;
};

}  // namespace sgpu::launcher
