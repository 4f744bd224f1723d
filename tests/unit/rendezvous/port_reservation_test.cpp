#include <doctest/doctest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <filesystem>
#include <set>
#include <vector>

#include "sgpu/env/error.hpp"
#include "sgpu/rendezvous/port_reservation.hpp"

using namespace sgpu::rendezvous;

TEST_CASE("rendezvous::master_port_range") {
  SUBCASE("above the ephemeral range when it leaves 1024 ports or more") {
    CHECK(master_port_range({32768, 60999}) == PortRange{61000, 65535});
    CHECK(master_port_range({1024, 64511}) == PortRange{64512, 65535});
  }
  SUBCASE("below it otherwise, from 1024") {
    CHECK(master_port_range({32768, 65000}) == PortRange{1024, 32767});
    CHECK(master_port_range({49152, 65535}) == PortRange{1024, 49151});
  }
}

TEST_CASE("rendezvous::parse_port_range") {
  CHECK(parse_port_range("32768\t60999\n") == PortRange{32768, 60999});
  CHECK(parse_port_range("1024 65535") == PortRange{1024, 65535});
  SUBCASE("not two ports in order") {
    for (const char* bad : {"", "32768", "60999 32768", "0 100", "1 70000", "a b", "1 2 3"}) {
      CAPTURE(bad);
      CHECK(parse_port_range(bad) == PortRange{});
    }
  }
}

namespace {
bool plain_bind_works(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(fd, 1) == 0;
  ::close(fd);
  return ok;
}

struct LockDir {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("sgpu-port-test-" + std::to_string(::getpid()));
  ~LockDir() { std::filesystem::remove_all(path); }
};
}  // namespace

TEST_CASE("rendezvous::PortReservation") {
  LockDir dir;
  SUBCASE("a reserved port is free for a plain bind and taken for other reservations") {
    std::vector<PortReservation> held;
    std::set<int> ports;
    for (int i = 0; i < 30; ++i) {
      held.emplace_back(0, dir.path.string());
      ports.insert(held.back().port());
    }
    CHECK(ports.size() == 30);
    CHECK(plain_bind_works(held.front().port()));
  }
  SUBCASE("a port another reservation holds is refused by name") {
    PortReservation first(0, dir.path.string());
    CHECK_THROWS_WITH_AS(PortReservation(first.port(), dir.path.string()),
                         doctest::Contains("another sgpu job on this node uses the port"), sgpu::Error);
  }
  SUBCASE("released with the reservation") {
    int port = 0;
    { port = PortReservation(0, dir.path.string()).port(); }
    CHECK(PortReservation(port, dir.path.string()).port() == port);
  }
  SUBCASE("its lock file goes with it: the directory does not fill up") {
    { PortReservation held(0, dir.path.string()); }
    CHECK(std::filesystem::is_empty(dir.path));
  }
}

TEST_CASE("rendezvous::PortReservation in a lock directory it cannot trust") {
  namespace fs = std::filesystem;
  LockDir dir;
  fs::create_directories(dir.path);
  auto shared = dir.path / "sgpu-ports";
  auto own = fs::path(shared.string() + "-" + std::to_string(::geteuid()));
  SUBCASE("a symlink at the path is not followed") {
    auto elsewhere = dir.path / "victim";
    fs::create_directories(elsewhere);
    fs::create_directory_symlink(elsewhere, shared);
    PortReservation held(0, shared.string());
    CHECK(fs::is_empty(elsewhere));
    CHECK(fs::exists(own / std::to_string(held.port())));  // this user's own directory instead
  }
  SUBCASE("a directory others may empty, without the sticky bit, is not used") {
    fs::create_directories(shared);
    fs::permissions(shared, fs::perms::all, fs::perm_options::replace);  // 0777, no sticky bit
    PortReservation held(0, shared.string());
    CHECK(fs::is_empty(shared));
    CHECK(fs::exists(own / std::to_string(held.port())));
  }
  SUBCASE("the shared form (world-writable and sticky) is used") {
    PortReservation held(0, shared.string());
    CHECK(fs::exists(shared / std::to_string(held.port())));
    auto mode = fs::status(shared).permissions();
    CHECK((mode & fs::perms::sticky_bit) != fs::perms::none);
  }
}
