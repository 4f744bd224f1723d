#pragma once
// One rank: a child process in its own process group, killed by the kernel if
// sgpu dies (PR_SET_PDEATHSIG), with its stdout and stderr on pipes and
// /dev/null as stdin. Started with clone(CLONE_VM): the cost of a start does
// not grow with the ranks already running, and a batch of ranks exec beside
// each other (InBackground).
#include <sys/resource.h>
#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/plan/plan.hpp"

namespace sgpu::launcher {

class ChildProcess;

struct RankLaunch {
  int rank = 0;
  std::string executable;         // absolute path
  std::vector<std::string> argv;  // argv[0] included
  env::RankEnvironment env;
  // Set over `env` at exec (SGPU_DEADLINE, per attempt), which stays shared with the plan.
  env::Environment env_overrides;
  std::string cwd;
  std::vector<int> cpus;  // bound to these CPUs before exec (--cpu-bind); empty: sgpu's own
  int numa_node = -1;     // its memory preferred on this NUMA node; -1: the kernel's default
};

// The plan's ranks as started: program, arguments, environment, binding
// (--cpu-bind none: sgpu's own CPUs).
std::vector<RankLaunch> rank_launches(const LaunchPlan& plan);

// How big to make each rank's stdout pipe when `ranks` run on this node (pure).
// A bigger pipe lets sgpu take more per read and the rank write longer between
// waits: 256 KiB (read whole) cut sgpu's CPU per GiB forwarded by a fifth
// against 64 KiB (section 4 of BENCHMARKS.md); 1 MiB was no better, and at
// times far worse (the copies no longer fit the CPU's cache). The sizes share
// a budget of 16 MiB, because the kernel counts pipe capacity per user
// (fs.pipe-user-pages-soft, 64 MiB by default) and, past it, gives that
// user's new pipes two pages. 0: leave the kernel's default (64 KiB).
std::size_t rank_pipe_size(std::size_t ranks);

class RankProcess {
 public:
  // Starts the process; on failure throws std::system_error with the errno of
  // the failed exec (ENOENT, EACCES, ...). `open_files`: the RLIMIT_NOFILE the
  // rank gets (sgpu's own before it raised it), nullptr for sgpu's.
  // `stdout_pipe`: the stdout pipe's size (rank_pipe_size), 0 for the
  // default; a size the kernel refuses leaves the default. `caught`: the
  // signals with a handler of sgpu's now (caught_signals()), for a batch of
  // ranks; nullptr: read for this rank alone.
  RankProcess(boost::asio::io_context& io, const RankLaunch& launch, const rlimit* open_files = nullptr,
              std::size_t stdout_pipe = 0, const sigset_t* caught = nullptr);
  // The same, returning once the rank is cloned, while it sets itself up and
  // execs beside sgpu: `launch` (and `open_files`, `caught`) must outlive
  // its start_error(), which waits for every rank started so far and says
  // how this one's start went. Until then the rank may not be in its own
  // group yet. Throws only when the rank could not be cloned (no pipe, no
  // process).
  struct InBackground {};
  RankProcess(boost::asio::io_context& io, const RankLaunch& launch, InBackground, const rlimit* open_files,
              std::size_t stdout_pipe, const sigset_t* caught);
  // The errno of the step of its start that failed (its exec, chdir,
  // binding), 0 when it exec'd; waits until every rank started so far has
  // exec'd or failed. A rank that failed has exited; its destructor reaps it.
  int start_error();
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  int pid() const;
  // Signals the rank's whole process group; a group that is gone is no error.
  void signal_group(int sig) const;
  // Signals the rank's own process alone (through its pidfd: never another
  // process that got its number).
  void signal(int sig) const;
  // Whether it has exited (its status not taken yet, or taken by its wait).
  bool exited() const;

  // The read ends of its stdout and stderr pipes, non-blocking: wait for
  // readable, then read() into any buffer (no buffer per rank).
  boost::asio::posix::stream_descriptor& out() { return out_; }
  boost::asio::posix::stream_descriptor& err() { return err_; }

  // Calls back once with the raw wait status when the rank exits (pidfd).
  void async_wait(std::function<void(int wait_status)> on_exit);

 private:
  boost::asio::posix::stream_descriptor out_;
  boost::asio::posix::stream_descriptor err_;
  struct Starting;
  void start(boost::asio::io_context& io, const RankLaunch& launch, const rlimit* open_files, std::size_t stdout_pipe,
             const sigset_t* caught);
  std::unique_ptr<ChildProcess> child_;  // its start and wait, as every child's
  std::unique_ptr<Starting> starting_;   // what the child reads until it execs; gone after start_error()
};

}  // namespace sgpu::launcher
