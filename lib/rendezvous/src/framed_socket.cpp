#include "sgpu/rendezvous/framed_socket.hpp"

#include <array>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/write.hpp>

#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::rendezvous {
namespace asio = boost::asio;

namespace {
constexpr std::size_t kReadBuffer = 64 * 1024;
// Bytes taken from one connection before others get a turn.
constexpr std::size_t kReadBudget = 1024 * 1024;
constexpr std::size_t kMaxGather = 64;

std::array<char, kReadBuffer>& shared_read_buffer() {
  thread_local std::array<char, kReadBuffer> buffer;
  return buffer;
}
}  // namespace

FramedSocket::FramedSocket(tcp::socket socket, std::uint32_t max_payload)
    : socket_(std::move(socket)), linger_(socket_.get_executor()), decoder_(max_payload) {
  boost::system::error_code ec;
  socket_.non_blocking(true, ec);
  socket_.set_option(tcp::no_delay(true), ec);
  auto remote = socket_.remote_endpoint(ec);
  if (!ec) {
    peer_address_ = unmap_v4(remote.address().to_string());
    peer_port_ = remote.port();
  }
  auto local = socket_.local_endpoint(ec);
  if (!ec) local_address_ = unmap_v4(local.address().to_string());
  last_received_ = std::chrono::steady_clock::now();
}

FramedSocket::~FramedSocket() = default;

std::string FramedSocket::peer() const {
  return Endpoint{peer_address_.empty() ? "?" : peer_address_, peer_port_}.str();
}

void FramedSocket::start(FrameHandler on_frame, CloseHandler on_closed) {
  on_frame_ = std::move(on_frame);
  on_closed_ = std::move(on_closed);
  wait_readable();
}

void FramedSocket::wait_readable() {
  socket_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this()](boost::system::error_code ec) { self->on_readable(ec); });
}

void FramedSocket::on_readable(boost::system::error_code ec) {
  if (!open_) return;
  if (ec) {
    fail(ec.message());
    return;
  }
  auto& buffer = shared_read_buffer();
  std::size_t taken = 0;
  while (taken < kReadBudget) {
    std::size_t n = socket_.read_some(asio::buffer(buffer), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec == asio::error::eof) {
      if (closing_)
        close();
      else
        fail("the connection was closed by the other side");
      return;
    }
    if (ec) {
      fail(ec.message());
      return;
    }
    last_received_ = std::chrono::steady_clock::now();
    taken += n;
    if (closing_) continue;  // draining until the peer closes: frames are no longer acted on
    decoder_.feed(std::string_view(buffer.data(), n));
    if (!dispatch()) return;
  }
  wait_readable();
}

bool FramedSocket::dispatch() {
  try {
    while (open_ && !closing_) {
      auto frame = decoder_.next();
      if (!frame) break;
      on_frame_(frame->type, frame->payload);
    }
  } catch (const ProtocolError& e) {
    fail(fmt::format("protocol error: {}", e.what()));
    return false;
  }
  return open_;
}

void FramedSocket::send(const Message& message) {
  if (!open_ || closing_) return;
  auto frame = encode(message);
  queued_bytes_ += frame.size();
  queue_.push_back(std::move(frame));
  if (in_flight_ == 0) write_next();
}

void FramedSocket::write_next() {
  if (queue_.empty()) {
    if (closing_) shut_down_sending();
    return;
  }
  std::vector<asio::const_buffer> buffers;
  for (std::size_t i = 0; i < queue_.size() && i < kMaxGather; ++i) buffers.push_back(asio::buffer(queue_[i]));
  in_flight_ = buffers.size();
  asio::async_write(socket_, buffers, [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
    if (!self->open_) return;
    if (ec) {
      self->fail(ec.message());
      return;
    }
    for (std::size_t i = 0; i < self->in_flight_; ++i) {
      self->queued_bytes_ -= self->queue_.front().size();
      self->queue_.pop_front();
    }
    self->in_flight_ = 0;
    self->write_next();
  });
}

void FramedSocket::shut_down_sending() {
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_send, ignored);
}

void FramedSocket::close_after_flush(std::chrono::milliseconds linger) {
  if (!open_ || closing_) return;
  closing_ = true;
  if (in_flight_ == 0) shut_down_sending();
  linger_.expires_after(linger);
  linger_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec) self->close();
  });
}

void FramedSocket::close() {
  if (!open_) return;
  open_ = false;
  boost::system::error_code ignored;
  linger_.cancel();
  socket_.close(ignored);
  queue_.clear();
  queued_bytes_ = 0;
  // Handlers may hold what owns this socket: let go of them.
  on_frame_ = nullptr;
  on_closed_ = nullptr;
}

void FramedSocket::fail(const std::string& why) {
  if (!open_) return;
  auto on_closed = std::move(on_closed_);
  bool was_closing = closing_;
  close();
  if (on_closed && !was_closing) on_closed(why);
}

}  // namespace sgpu::rendezvous
