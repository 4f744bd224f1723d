#pragma once
// One child process that is not a rank: an ssh session, an srun step, a
// SLURM query or salloc, tar, a helper command (py-spy). Started as ranks are
// (spawn_process: clone sharing sgpu's memory, nothing but system calls
// before exec), because a plain fork beside sgpu's log and console threads could
// inherit a lock one of them held and never reach exec. It runs in its own
// process group (the terminal's Ctrl-C reaches sgpu, which decides what to
// pass on) and, unless told otherwise, dies with sgpu (PR_SET_PDEATHSIG).
#include <sys/types.h>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/readable_pipe.hpp>
#include <boost/asio/writable_pipe.hpp>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

// `name` as exec would find it on a PATH (a name with a slash as it is): an
// executable regular file in the first directory that has one; "" when it
// is nowhere there. The PATH of `environment`, or of sgpu's own environment.
std::string find_on_path(const std::string& name, const env::Environment& environment);
std::string find_on_path(const std::string& name);

// Where one of the child's descriptors 0, 1 and 2 goes.
struct ChildStream {
  enum class Kind { Null, Pipe, File };
  Kind kind = Kind::Null;
  std::string file;  // Kind::File: stdin reads it; stdout or stderr creates or truncates it

  static ChildStream null() { return {}; }
  static ChildStream pipe() { return {Kind::Pipe, {}}; }
  static ChildStream path(std::string file) { return {Kind::File, std::move(file)}; }
};

struct ChildOptions {
  std::vector<std::string> argv;                // argv[0] looked up on the child's PATH (find_on_path)...
  std::string program;                          // ...unless this names the file to run
  std::optional<env::Environment> environment;  // unset: sgpu's own
  std::string cwd;                              // "": sgpu's own
  ChildStream in, out, err;
  bool dies_with_sgpu = true;  // false: it outlives a killed sgpu (salloc, to release its job)
  bool own_session = false;    // a session of its own, so no controlling terminal, not only a group
};

struct SpawnRequest;

class ChildProcess {
 public:
  // Starts the child; throws std::system_error: ENOENT naming argv[0] when
  // it is not on the PATH, else the errno of the step that failed (a file to
  // open, chdir, exec) naming the file.
  ChildProcess(boost::asio::io_context& io, const ChildOptions& options);
  // For process/ (RankProcess): starts `request` as it is, its descriptors
  // the caller's, and returns while the child still execs (start_spawn): the
  // request and `*exec_error` stay the caller's until settle_spawns(). in(),
  // out() and err() stay closed.
  ChildProcess(boost::asio::io_context& io, const SpawnRequest& request, int* exec_error);
  // Kills its group and itself (SIGKILL) and reaps it if it was neither
  // reaped nor detached.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // Its whole process group (with what it started, such as ssh's
  // ProxyCommand); a group that is gone is no error.
  void signal_group(int sig) const;
  // Itself alone, through its pidfd (never another process that got its
  // number); nothing once it is reaped.
  void signal(int sig) const;
  // Whether it has exited (its status not taken yet, or taken).
  bool exited() const;

  boost::asio::writable_pipe& in() { return in_; }
  boost::asio::readable_pipe& out() { return out_; }
  boost::asio::readable_pipe& err() { return err_; }

  // Calls back once, on the loop, with the raw wait status when it exits
  // (pidfd); (255 << 8) when its status could not be had. Never after the
  // ChildProcess is gone.
  void async_wait(std::function<void(int wait_status)> on_exit);
  // The same, blocking: for a child already ending (its pipes closed) or run
  // to its end off the loop (tar). No async_wait may be pending.
  int wait();
  // Lets it go: never killed or reaped by this object (salloc, which must
  // release its job after sgpu has gone on or died).
  void detach();

 private:
  struct Impl;
  void start(boost::asio::io_context& io, const SpawnRequest& request, int* exec_error = nullptr);
  void kill_and_reap();
  boost::asio::writable_pipe in_;
  boost::asio::readable_pipe out_;
  boost::asio::readable_pipe err_;
  std::shared_ptr<Impl> impl_;
  pid_t pid_ = -1;
};

}  // namespace sgpu::launcher
