#pragma once
// Starts node agents over the system ssh client, on the launcher's loop: for
// each host a few ssh commands in order (copy sgpu, unpack the synced
// directory, then the agent), at most `max_parallel` hosts connecting at once.
// A host stops counting against the cap once its agent said it started (the
// bootstrap script's ready marker), so a thousand hosts never open a thousand
// handshakes at the same moment.
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "backends/ssh/ssh_scripts.hpp"

namespace sgpu::launcher {

struct SshStep {
  std::string what;               // "copy sgpu", "unpack /src", "start the agent": for messages
  std::vector<std::string> argv;  // the whole ssh command line
  std::string stdin_file;         // "": stdin is a pipe that gets `stdin_text`, then stays open
  std::string stdin_text;         // secrets, one per line
};

struct SshNode {
  std::string name;            // the host as the user listed it
  std::vector<SshStep> steps;  // every step but the last must exit 0; the last is the agent
};

// How a host's ssh ended: a preparation step failed, the agent never said it
// started, or the agent ended (normally or not) after it had.
using SshNodeExit = ssh::SshExit;

class SshNodesHandler {
 public:
  virtual ~SshNodesHandler() = default;
  virtual void on_agent_ready(int /*node*/) {}
  // A line the agent's side wrote (stdout or stderr) once it runs.
  virtual void on_agent_line(int /*node*/, const std::string& /*line*/) {}
  // A step before the agent's succeeded: what it is, the lines it (and the
  // steps before) wrote, and how long it took.
  virtual void on_step_done(int /*node*/, const std::string& /*what*/, const std::vector<std::string>& /*said*/,
                            double /*seconds*/) {}
  // Once per node: its last ssh ended, or a step before failed.
  virtual void on_node_exit(int node, const SshNodeExit& exit) = 0;
};

class SshNodes {
 public:
  SshNodes(boost::asio::io_context& io, std::vector<SshNode> nodes, int max_parallel, SshNodesHandler& handler);
  ~SshNodes();
  SshNodes(const SshNodes&) = delete;
  SshNodes& operator=(const SshNodes&) = delete;

  void start();
  // Starts no more hosts (the job failed); running ssh sessions go on, so
  // their agents can still stop their ranks and report.
  void stop_starting();
  // Ends every session and starts no more steps. A running agent's session
  // ends by closing ssh's stdin: the agent sees the end of its input, stops
  // its ranks and exits, and ssh exits after it, so an exited ssh means
  // nothing is left on its host. An ssh still connecting or preparing gets
  // SIGTERM at once; one whose agent has not ended after `wait` gets it too.
  void end(std::chrono::steady_clock::duration wait);
  // --spares: one more node (a spare taking a lost node's place), started
  // as the others were; its index for the handler. -1 once end() was called.
  int add(SshNode node);
  // Ends one node's session as end() ends each (a lost node that a spare
  // replaces); one not started yet is never started.
  void end_one(int index, std::chrono::steady_clock::duration wait);
  // Every node has reported on_node_exit.
  bool all_exited() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgpu::launcher
