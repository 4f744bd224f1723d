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

#include <memory>
#include <string_view>

namespace sgpu::launcher {

class OrphanGuard {
 public:
  OrphanGuard();
  // Starts the guardian; throws sgpu::Error if it cannot. Its program execs
  // beside sgpu (start_spawn): sgpu goes on at once, and the first watch()
  // (after the ranks' start settled it) falls back to a fork where the exec
  // failed; what was sent before that waits in the pipe. Until its first
  // call the child shares sgpu's descriptor table, so the table must not
  // grow meanwhile: a shared table grows only after an RCU grace period
  // (milliseconds on a busy host). Start it after reserve_descriptor_table().
  void start();
  // Ends the guardian in order (it reads end of file and exits) and leaves
  // its exit to kill_adopted_orphans(), sgpu's last step, to wait for
  // (reap_before_exit): it exits while sgpu writes the run's end.
  ~OrphanGuard();
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
  // Once: waits for the program's start, and forks the guardian where it failed.
  void confirm();
  bool settle_program();
  void fork_guardian();
  struct Program;  // the program's start in flight: its request, kept until settled
  std::unique_ptr<Program> program_;
  int fd_ = -1;
  int read_end_ = -1;  // kept until the guardian runs: a fallback fork reads it
  pid_t guardian_ = -1;
};
}  // namespace sgpu::launcher
