#include "sgpu/rendezvous/port_reservation.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::rendezvous {

namespace {
constexpr int kLowestPort = 1024;
constexpr int kHighestPort = 65535;
constexpr int kEnoughPorts = 1024;
constexpr PortRange kLinuxDefaultEphemeral{32768, 60999};

PortRange ephemeral_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  std::stringstream text;
  text << in.rdbuf();
  auto range = parse_port_range(text.str());
  return range.first == 0 ? kLinuxDefaultEphemeral : range;
}

// 0 when a plain bind (no SO_REUSEADDR) of `port` on every address works now,
// else the errno. The socket never listens, so closing it leaves no TIME_WAIT.
int probe_bind(int port, bool reuse_addr) {
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int one = 1;
  if (reuse_addr) ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc = 0;
  if (v6) {
    // Dual-stack: it conflicts with IPv4 and IPv6 binds of the port alike.
    int zero = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  } else {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  }
  int err = rc == 0 ? 0 : errno;
  ::close(fd);
  return err;
}

// Whether sgpu may trust the lock directory it opened: a real directory (the
// open refused a symlink), and nobody but its owner, root or a sticky bit's
// rules can swap the files in it; owned by this user or root, or shared the
// way every sgpu makes it (world-writable and sticky, like /tmp).
bool trusted_lock_dir(const struct stat& st, bool private_only) {
  if (!S_ISDIR(st.st_mode)) return false;
  bool owner_ok = st.st_uid == ::geteuid() || (!private_only && st.st_uid == 0);
  bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
  bool sticky = (st.st_mode & S_ISVTX) != 0;
  if (private_only) return owner_ok && !others_write;
  return (owner_ok && (!others_write || sticky)) || (sticky && (st.st_mode & S_IWOTH) != 0);
}

// Opens `dir` (made if missing, with `mode`) as a directory descriptor, or
// -1 when it is missing and cannot be made, a symlink, or not trusted.
int open_lock_dir(const std::string& dir, mode_t mode, bool private_only) {
  if (::mkdir(dir.c_str(), mode) == 0) ::chmod(dir.c_str(), mode);  // not narrowed by the umask
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !trusted_lock_dir(st, private_only)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The shared lock directory, world-writable and sticky like /tmp itself, so
// that every user's sgpu coordinates through it; when another user made
// something else of that path (a symlink, a directory they can empty), this
// user's own beside it. -1 when neither is usable: the probe alone decides.
int lock_dir_fd(const std::string& dir) {
  int fd = open_lock_dir(dir, 01777, false);
  if (fd < 0) fd = open_lock_dir(fmt::format("{}-{}", dir, ::geteuid()), 0700, true);
  return fd;
}

enum class Lock { Taken, Busy, Unusable };

// An exclusive, non-blocking flock on dir/<port>: Busy while another sgpu
// holds that port. The holder deletes the file when it lets go, so the
// directory does not fill up; a lock taken on a file that was deleted (or
// replaced) meanwhile is worthless, so the file must still be the one at
// the path once locked.
Lock lock_port(int dir, int port, int& fd) {
  auto name = std::to_string(port);
  for (int attempt = 0; attempt < 3; ++attempt) {
    fd = ::openat(dir, name.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0444);
    if (fd < 0) return Lock::Unusable;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int err = errno;
      ::close(fd);
      fd = -1;
      return err == EWOULDBLOCK ? Lock::Busy : Lock::Unusable;
    }
    struct stat held {};
    struct stat now {};
    if (::fstat(fd, &held) == 0 && ::fstatat(dir, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
        held.st_dev == now.st_dev && held.st_ino == now.st_ino)
      return Lock::Taken;
    ::close(fd);  // its holder deleted it as we locked it: try the new one
    fd = -1;
  }
  return Lock::Busy;
}
}  // namespace

PortRange master_port_range(PortRange ephemeral) {
  PortRange above{ephemeral.last + 1, kHighestPort};
  if (above.last - above.first + 1 >= kEnoughPorts) return above;
  return {kLowestPort, ephemeral.first - 1};
}

PortRange parse_port_range(const std::string& text) {
  int first = 0;
  int last = 0;
  char rest = 0;
  if (std::sscanf(text.c_str(), "%d %d %c", &first, &last, &rest) != 2) return {};
  if (first < 1 || last > kHighestPort || first > last) return {};
  return {first, last};
}

PortReservation::PortReservation(int port, const std::string& lock_dir) {
  dir_fd_ = lock_dir_fd(lock_dir);
  bool locks = dir_fd_ >= 0;
  if (port != 0) {
    // The user's port: only other sgpu jobs and current users of it are refused.
    // SO_REUSEADDR on the probe, as the user's own server (TCPStore) is likely to
    // set it, so a previous run's TIME_WAIT does not count as in use.
    if (locks && lock_port(dir_fd_, port, lock_fd_) == Lock::Busy) {
      release();
      throw Error(
          fmt::format("--master-port {}: another sgpu job on this node uses the port; omit --master-port "
                      "and sgpu picks a free one",
                      port));
    }
    if (int err = probe_bind(port, true)) {
      release();
      throw Error(
          fmt::format("--master-port {}: the port is in use on this node ({}); omit --master-port "
                      "and sgpu picks a free one",
                      port, std::strerror(err)));
    }
    port_ = port;
    return;
  }
  auto range = master_port_range(ephemeral_range());
  int count = range.last - range.first + 1;
  // A random start spreads concurrent jobs over the range: few lock attempts
  // each. getrandom(2) itself: std::random_device asks the CPU first
  // (cpuid, for rdrand), which a virtual machine traps, ~20 us a launch here.
  unsigned pick = 0;
  if (::getrandom(&pick, sizeof pick, 0) != sizeof pick) pick = static_cast<unsigned>(::getpid()) * 2654435761U;
  int offset = static_cast<int>(pick % static_cast<unsigned>(count));
  for (int i = 0; i < count; ++i) {
    int candidate = range.first + (offset + i) % count;
    int fd = -1;
    if (locks) {
      auto lock = lock_port(dir_fd_, candidate, fd);
      if (lock == Lock::Busy) continue;
      // A lock file another user made unreadable: without its lock, the probe alone decides.
    }
    if (probe_bind(candidate, false) == 0) {
      lock_fd_ = fd;
      port_ = candidate;
      return;
    }
    if (fd >= 0) {
      ::unlinkat(dir_fd_, std::to_string(candidate).c_str(), 0);  // still holding its lock
      ::close(fd);
    }
  }
  release();
  throw Error(fmt::format("cannot reserve a free MASTER_PORT: every port in {}-{} (outside the kernel's ephemeral "
                          "range) is in use; pass --master-port",
                          range.first, range.last),
              1);
}

PortReservation::~PortReservation() { release(); }

void PortReservation::release() {
  // Deleted while locked (whoever opened it meanwhile sees that it is gone),
  // then let go. Another user's file in the shared directory stays.
  if (lock_fd_ >= 0 && dir_fd_ >= 0) ::unlinkat(dir_fd_, std::to_string(port_).c_str(), 0);
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
  lock_fd_ = -1;
  dir_fd_ = -1;
}

PortReservation::PortReservation(PortReservation&& other) noexcept
    : lock_fd_(std::exchange(other.lock_fd_, -1)), dir_fd_(std::exchange(other.dir_fd_, -1)), port_(other.port_) {}

PortReservation& PortReservation::operator=(PortReservation&& other) noexcept {
  if (this != &other) {
    release();
    lock_fd_ = std::exchange(other.lock_fd_, -1);
    dir_fd_ = std::exchange(other.dir_fd_, -1);
    port_ = other.port_;
  }
  return *this;
}

}  // namespace sgpu::rendezvous
