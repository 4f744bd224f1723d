#pragma once
// The agent's side of the rendezvous, on the agent's Asio loop: connects to
// the launcher (retrying until the join timeout, since the launcher may start
// later), checks that the launcher knows the secret, proves it does too,
// joins, takes its part in the reachability check before Start (Probe: node 0
// listens on MASTER_PORT, the others connect to it), and then carries the
// run's messages both ways with heartbeats.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>

#include "sgpu/rendezvous/auth.hpp"
#include "sgpu/rendezvous/endpoint.hpp"
#include "sgpu/rendezvous/protocol.hpp"

namespace sgpu::rendezvous {

struct ClientOptions {
  Endpoint endpoint;
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};   // to reach the launcher
  std::chrono::milliseconds hello_timeout{std::chrono::seconds(10)};  // for its hello, once connected
  // The address the client's connections (the rendezvous's, the
  // reachability check's) leave from; "": the kernel's choice.
  std::string source_address{};
};

class ClientHandler {
 public:
  virtual ~ClientHandler() = default;
  // What to join with. Throwing sgpu::Error tells the launcher this node
  // cannot run (Abort) and ends the client.
  virtual Join on_welcome(const Welcome& welcome) = 0;
  // The node's place; prepare and say Ready (node 0 reserves MASTER_PORT),
  // or return nullopt and call RendezvousClient::ready() once prepared (a
  // preflight). Throwing sgpu::Error aborts as above.
  virtual std::optional<Ready> on_assign(const Assign& assign) = 0;
  virtual void on_start(const Start& start) = 0;
  // PreflightId while preparing; Finish instead of Start (--preflight-only);
  // Signal, Restart and Finish during the run.
  virtual void on_message(Message&& message) = 0;
  // The end of the client, once: refused, aborted, the launcher unreachable,
  // gone or silent. Not called after close().
  virtual void on_lost(const std::string& why, int exit_code) = 0;
};

class RendezvousClient {
 public:
  RendezvousClient(boost::asio::io_context& io, ClientOptions options, Secret secret, ClientHandler& handler);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  void start();
  void send(const Message& message);
  // The Ready that on_assign() left for later; ignored unless it is awaited.
  void ready(const Ready& ready);
  // After Finish: closes once what is queued has been sent.
  void close();
  // The interface this node reached MASTER_ADDR through in the reachability
  // check ("" before it, where it found no route, or on a job of one node).
  const std::string& route() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgpu::rendezvous
