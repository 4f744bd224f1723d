#pragma once
// Kills the ranks' process groups if sgpu dies, however it dies.
//
// PR_SET_PDEATHSIG only reaches a rank's first process; what that process
// started (data loader workers, `sh -c 'a & b'`) would outlive a SIGKILLed
// sgpu. So sgpu starts a small guardian at start, tells it each rank's process
// group through a pipe, and the guardian blocks in read(): when sgpu exits for
// any reason the pipe reaches end of file and the guardian SIGKILLs every
// group still registered. No polling, no signals. A process that leaves its
// group with setsid() is beyond it (that needs cgroups).
//
// The guardian is its own freestanding program (orphan_guard_program.cpp,
// embedded in sgpu and started from a memfd): a few pages, where a fork of
// sgpu held 2.3 MiB of peak RSS for the whole run. Where that program cannot
// start (another architecture, memfd exec forbidden), sgpu forks as before.
#include <sys/types.h>

namespace sgpu::launcher {

class OrphanGuard {
 public:
  OrphanGuard();   // starts the guardian; throws sgpu::Error if it cannot
  ~OrphanGuard();  // closes the pipe and reaps the guardian
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;

  void watch(pid_t process_group);
  // The group's leader was reaped and its group killed: forget it, so a later
  // reuse of the number is never signalled.
  void forget(pid_t process_group);

 private:
  void send(int op, pid_t process_group);
  int fd_ = -1;
  pid_t guardian_ = -1;
};

}  // namespace sgpu::launcher
