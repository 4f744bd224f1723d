#pragma once
// One rank: a child process in its own process group, killed by the kernel if
// sgpu dies (PR_SET_PDEATHSIG), with its stdout and stderr on pipes.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/readable_pipe.hpp>

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
  // the failed exec (ENOENT, EACCES, ...).
  RankProcess(boost::asio::io_context& io, const RankLaunch& launch);
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  int pid() const { return pid_; }
  // Signals the rank's whole process group; a group that is gone is no error.
  void signal_group(int sig) const;

  boost::asio::readable_pipe& out() { return out_; }
  boost::asio::readable_pipe& err() { return err_; }

  // Calls back once with the raw wait status when the rank exits (pidfd).
  void async_wait(std::function<void(int wait_status)> on_exit);

 private:
  struct Impl;
  boost::asio::readable_pipe out_;
  boost::asio::readable_pipe err_;
  std::unique_ptr<Impl> impl_;
  int pid_ = -1;
};

}  // namespace sgpu::launcher
