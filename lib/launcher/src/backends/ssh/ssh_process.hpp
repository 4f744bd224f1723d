#pragma once
// One system ssh client: a child in its own process group (the terminal's
// Ctrl-C reaches sgpu, which stops remote nodes through the rendezvous, not
// by cutting their connections), killed by the kernel if sgpu dies; stdin a
// pipe (secrets, then held open) or a file (a tarball, a binary); stdout and
// stderr on pipes.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>

namespace sgpu::launcher {

class SshProcess {
 public:
  // `argv[0]` is looked up on PATH. `stdin_file` empty: stdin is in(), a
  // pipe. Throws std::system_error when the program cannot be started.
  SshProcess(boost::asio::io_context& io, const std::vector<std::string>& argv, const std::string& stdin_file);
  ~SshProcess();
  SshProcess(const SshProcess&) = delete;
  SshProcess& operator=(const SshProcess&) = delete;

  int pid() const { return pid_; }
  // ssh and what it started in its group: a ProxyCommand (ProxyJump's ssh
  // -W), which ssh killed before it connects leaves running. A ControlPersist
  // master is not in it (it starts its own session).
  void signal_group(int sig) const;

  boost::asio::writable_pipe& in() { return in_; }
  boost::asio::readable_pipe& out() { return out_; }
  boost::asio::readable_pipe& err() { return err_; }

  // Calls back once with the raw wait status when ssh exits (pidfd).
  void async_wait(std::function<void(int wait_status)> on_exit);

 private:
  struct Impl;
  boost::asio::writable_pipe in_;
  boost::asio::readable_pipe out_;
  boost::asio::readable_pipe err_;
  std::unique_ptr<Impl> impl_;
  int pid_ = -1;
};

// Where `program` is on PATH ("" when not found), for a message that says so.
std::string find_on_path(const std::string& program, const std::string& path);

}  // namespace sgpu::launcher
