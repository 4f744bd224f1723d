#pragma once
// One rank: a child process in its own process group, killed by the kernel if
// sgpu dies (PR_SET_PDEATHSIG), with its stdout and stderr on pipes and
// /dev/null as stdin. Started with clone(CLONE_VM | CLONE_VFORK): the cost of a
// start does not grow with the ranks already running.
#include <sys/resource.h>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

struct RankLaunch {
  int rank = 0;
  std::string executable;         // absolute path
  std::vector<std::string> argv;  // argv[0] included
  env::Environment env;
  std::string cwd;
};

class RankProcess {
 public:
  // Starts the process; on failure throws std::system_error with the errno of
  // the failed exec (ENOENT, EACCES, ...). `open_files`: the RLIMIT_NOFILE the
  // rank gets (sgpu's own before it raised it), nullptr for sgpu's.
  RankProcess(boost::asio::io_context& io, const RankLaunch& launch, const rlimit* open_files = nullptr);
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  int pid() const { return pid_; }
  // Signals the rank's whole process group; a group that is gone is no error.
  void signal_group(int sig) const;

  // The read ends of its stdout and stderr pipes, non-blocking: wait for
  // readable, then read() into any buffer (no buffer per rank).
  boost::asio::posix::stream_descriptor& out() { return out_; }
  boost::asio::posix::stream_descriptor& err() { return err_; }

  // Calls back once with the raw wait status when the rank exits (pidfd).
  void async_wait(std::function<void(int wait_status)> on_exit);

 private:
  struct Impl;
  boost::asio::posix::stream_descriptor out_;
  boost::asio::posix::stream_descriptor err_;
  std::unique_ptr<Impl> impl_;
  int pid_ = -1;
};

}  // namespace sgpu::launcher
