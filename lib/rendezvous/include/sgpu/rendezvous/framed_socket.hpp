#pragma once
// One TCP connection that carries protocol frames, on the caller's Asio loop.
// Reads wait for readability and then drain the socket into one buffer shared
// by every connection of the thread, so an idle connection costs no read
// buffer (2048 agents, one launcher). Writes are queued and gathered. A frame
// that is oversized or cannot be decoded closes this connection only.
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "sgpu/rendezvous/protocol.hpp"

namespace sgpu::rendezvous {

class FramedSocket : public std::enable_shared_from_this<FramedSocket> {
 public:
  using tcp = boost::asio::ip::tcp;
  // Called for each whole frame; may throw ProtocolError (the connection is
  // then closed as if the frame were malformed) and may close the socket.
  using FrameHandler = std::function<void(std::uint8_t type, std::string_view payload)>;
  // Called once when the peer goes away or breaks the protocol, never after
  // the owner's own close().
  using CloseHandler = std::function<void(const std::string& why)>;

  FramedSocket(tcp::socket socket, std::uint32_t max_payload);
  ~FramedSocket();
  FramedSocket(const FramedSocket&) = delete;
  FramedSocket& operator=(const FramedSocket&) = delete;

  void start(FrameHandler on_frame, CloseHandler on_closed);
  void set_max_payload(std::uint32_t max_payload) { decoder_.set_max_payload(max_payload); }

  void send(const Message& message);
  // Closes at once; queued frames are dropped.
  void close();
  // Sends what is queued, then shuts the connection down and waits (at most
  // `linger`) for the peer to close its side, so the last frames arrive.
  // Frames received meanwhile are ignored.
  void close_after_flush(std::chrono::milliseconds linger);

  bool is_open() const { return open_ && !closing_; }
  const std::string& peer_address() const { return peer_address_; }  // IPv4 unmapped
  const std::string& local_address() const { return local_address_; }
  std::string peer() const;  // "10.0.0.2:41234", for messages
  std::chrono::steady_clock::time_point last_received() const { return last_received_; }
  std::size_t queued_bytes() const { return queued_bytes_; }

 private:
  void wait_readable();
  void on_readable(boost::system::error_code ec);
  bool dispatch();
  void write_next();
  void fail(const std::string& why);
  void shut_down_sending();

  tcp::socket socket_;
  boost::asio::steady_timer linger_;
  FrameDecoder decoder_;
  FrameHandler on_frame_;
  CloseHandler on_closed_;
  std::deque<std::string> queue_;
  std::size_t in_flight_ = 0;  // frames of the queue's front being written
  std::size_t queued_bytes_ = 0;
  std::string peer_address_;
  std::string local_address_;
  int peer_port_ = 0;
  std::chrono::steady_clock::time_point last_received_;
  bool open_ = true;
  bool closing_ = false;
};

}  // namespace sgpu::rendezvous
