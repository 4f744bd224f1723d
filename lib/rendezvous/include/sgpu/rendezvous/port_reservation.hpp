#pragma once
// MASTER_PORT for one job, chosen so that rank 0 can bind it plainly (no
// SO_REUSEADDR needed) and no two sgpu jobs on the node get the same one.
//
// sgpu holds no socket on the port: any socket it held would make a plain
// bind by rank 0 fail. Instead it picks a port outside the kernel's
// ephemeral range (ip_local_port_range), which the kernel never hands out on
// its own (connect(), bind to port 0), and takes an exclusive flock on a file
// named after the port in a directory every sgpu process on the node shares.
// The lock, not a socket, keeps other sgpu jobs off the port; a plain probe
// bind (closed at once, never listening, so no TIME_WAIT) checks that nothing
// else uses it. The lock lives as long as the reservation (or sgpu) does; the
// file goes with it. The directory is used only if it is a real directory
// that no other user can empty (see port_reservation.cpp), else a private
// one beside it.
#include <string>

namespace sgpu::rendezvous {

struct PortRange {
  int first = 0;
  int last = 0;  // inclusive
  bool operator==(const PortRange&) const = default;
};

// The ports sgpu picks MASTER_PORT from, given the kernel's ephemeral range:
// the ports above it when there are at least 1024 of them, else those below
// it down to 1024. Pure.
PortRange master_port_range(PortRange ephemeral);

// "32768\t60999\n" (/proc/sys/net/ipv4/ip_local_port_range); nullopt-like
// {0, 0} when the text is not two ports in order. Pure.
PortRange parse_port_range(const std::string& text);

// Where the per-port lock files live: shared by every sgpu on the node.
inline constexpr const char* kPortLockDir = "/tmp/sgpu-ports";

class PortReservation {
 public:
  // Reserves a free port (port == 0) or the given one; throws sgpu::Error.
  explicit PortReservation(int port = 0, const std::string& lock_dir = kPortLockDir);
  ~PortReservation();
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  PortReservation(PortReservation&& other) noexcept;
  PortReservation& operator=(PortReservation&& other) noexcept;

  int port() const { return port_; }

 private:
  void release();
  int lock_fd_ = -1;  // the flock on lock_dir/<port>; -1 when the directory was unusable
  int dir_fd_ = -1;   // the lock directory, opened once: no path is looked up twice
  int port_ = 0;
};

}  // namespace sgpu::rendezvous
