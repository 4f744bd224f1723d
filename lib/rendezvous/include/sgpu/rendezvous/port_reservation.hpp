#pragma once
// A TCP port held for the lifetime of a job so that no other job on the node
// can be given it. The socket is bound with SO_REUSEADDR but never listens:
// the kernel's port-0 allocator skips ports that have a bound socket, while
// rank 0's TCPStore (which also sets SO_REUSEADDR) can still bind and listen
// on it. No probe-then-release window, so concurrent launches never collide.
#include <string>

namespace sgpu::rendezvous {

class PortReservation {
 public:
  // Reserves a free port (port == 0) or the given one; throws sgpu::Error.
  explicit PortReservation(int port = 0);
  ~PortReservation();
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  PortReservation(PortReservation&& other) noexcept;
  PortReservation& operator=(PortReservation&& other) noexcept;

  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace sgpu::rendezvous
