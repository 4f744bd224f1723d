#include "sgpu/rendezvous/host_info.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <vector>

namespace sgpu::rendezvous {

namespace {
// One line of a sysfs file, without its newline; "" when missing.
std::string sys_line(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string address_text(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET) {
    if (::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof text) != nullptr)
      return text;
  } else if (a->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(a);
    if (!IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr) && ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text) != nullptr)
      return text;
  }
  return "";
}

const char* interface_kind(const std::string& type) {
  if (type == "1") return "ether";
  if (type == "772") return "loopback";
  if (type == "32") return "infiniband";
  return "other";
}
}  // namespace

std::string local_hostname() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

std::vector<std::string> local_addresses() {
  std::vector<std::string> v4;
  std::vector<std::string> v6;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  for (auto* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || (ifa->ifa_flags & IFF_UP) == 0 || (ifa->ifa_flags & IFF_LOOPBACK) != 0) continue;
    auto text = address_text(ifa->ifa_addr);
    if (!text.empty()) (ifa->ifa_addr->sa_family == AF_INET ? v4 : v6).push_back(std::move(text));
  }
  ::freeifaddrs(list);
  v4.insert(v4.end(), v6.begin(), v6.end());
  v4.erase(std::unique(v4.begin(), v4.end()), v4.end());
  if (v4.size() > 64) v4.resize(64);
  return v4;
}

std::vector<NetInterface> local_interfaces(const std::string& sys_root) {
  std::vector<NetInterface> out;
  std::map<std::string, std::size_t> index;
  std::map<std::string, std::vector<std::string>> v6;  // after the IPv4 ones
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (auto* ifa = list; ifa != nullptr; ifa = ifa->ifa_next) {
    std::string name = ifa->ifa_name;
    auto [it, added] = index.emplace(name, out.size());
    if (added) {
      if (out.size() >= kMaxInterfaces) {
        index.erase(it);
        continue;
      }
      NetInterface f;
      f.name = name;
      f.up = (ifa->ifa_flags & IFF_UP) != 0 && (ifa->ifa_flags & IFF_RUNNING) != 0;
      auto dir = std::filesystem::path(sys_root) / "class/net" / name;
      auto mtu = sys_line(dir / "mtu");
      f.mtu = mtu.empty() ? 0 : static_cast<std::uint32_t>(std::strtoul(mtu.c_str(), nullptr, 10));
      f.kind = interface_kind(sys_line(dir / "type"));
      out.push_back(std::move(f));
    }
    if (ifa->ifa_addr == nullptr) continue;
    auto text = address_text(ifa->ifa_addr);
    if (text.empty()) continue;
    auto& f = out[it->second];
    if (ifa->ifa_addr->sa_family == AF_INET)
      f.addresses.push_back(text);
    else
      v6[name].push_back(text);
  }
  ::freeifaddrs(list);
  for (auto& f : out) {
    for (auto& a : v6[f.name]) f.addresses.push_back(std::move(a));
    if (f.addresses.size() > 16) f.addresses.resize(16);
  }
  return out;
}

std::vector<RdmaDevice> rdma_devices(const std::string& sys_root) {
  std::vector<RdmaDevice> out;
  std::error_code ec;
  auto dir = std::filesystem::path(sys_root) / "class/infiniband";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (out.size() >= kMaxInterfaces) break;
    RdmaDevice d;
    d.name = entry.path().filename().string();
    d.link_layer = sys_line(entry.path() / "ports/1/link_layer");
    auto state = sys_line(entry.path() / "ports/1/state");  // "4: ACTIVE"
    auto colon = state.find(": ");
    d.state = colon == std::string::npos ? state : state.substr(colon + 2);
    out.push_back(std::move(d));
  }
  std::sort(out.begin(), out.end(), [](const RdmaDevice& a, const RdmaDevice& b) { return a.name < b.name; });
  return out;
}

std::string hostname_address(const std::string& hostname) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(hostname.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return "";
  auto text = address_text(found->ai_addr);
  ::freeaddrinfo(found);
  return text;
}

std::string route_interface(const std::string& address) {
  sockaddr_storage to{};
  socklen_t to_len = 0;
  auto* v4 = reinterpret_cast<sockaddr_in*>(&to);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&to);
  if (::inet_pton(AF_INET, address.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(9);  // any port: nothing is sent
    to_len = sizeof *v4;
  } else if (::inet_pton(AF_INET6, address.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(9);
    to_len = sizeof *v6;
  } else {
    return "";
  }
  int fd = ::socket(to.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_storage from{};
  socklen_t from_len = sizeof from;
  bool routed = ::connect(fd, reinterpret_cast<sockaddr*>(&to), to_len) == 0 &&
                ::getsockname(fd, reinterpret_cast<sockaddr*>(&from), &from_len) == 0;
  // The source address the kernel chose is on the interface the traffic leaves by.
  std::string name;
  if (routed && from.ss_family == AF_INET) {
    // IPv4: one ioctl lists the interfaces' addresses, where getifaddrs
    // dumps every link and address over netlink (16384 simulated agents
    // probing at once spent a twentieth of their CPU there).
    std::vector<ifreq> ifs(64);
    for (;;) {
      ifconf conf{};
      conf.ifc_len = static_cast<int>(ifs.size() * sizeof(ifreq));
      conf.ifc_req = ifs.data();
      if (::ioctl(fd, SIOCGIFCONF, &conf) != 0) break;
      auto got = static_cast<std::size_t>(conf.ifc_len) / sizeof(ifreq);
      if (got == ifs.size()) {  // perhaps more than fit: ask again with room
        ifs.resize(ifs.size() * 4);
        continue;
      }
      for (std::size_t i = 0; i < got && name.empty(); ++i)
        if (reinterpret_cast<sockaddr_in*>(&ifs[i].ifr_addr)->sin_addr.s_addr ==
            reinterpret_cast<sockaddr_in*>(&from)->sin_addr.s_addr)
          name.assign(ifs[i].ifr_name, strnlen(ifs[i].ifr_name, IFNAMSIZ));
      ::close(fd);
      return name;
    }
  }
  ::close(fd);
  if (!routed) return "";
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return "";
  for (auto* ifa = list; ifa != nullptr && name.empty(); ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == nullptr || ifa->ifa_addr->sa_family != from.ss_family) continue;
    bool same = from.ss_family == AF_INET
                    ? reinterpret_cast<sockaddr_in*>(ifa->ifa_addr)->sin_addr.s_addr ==
                          reinterpret_cast<sockaddr_in*>(&from)->sin_addr.s_addr
                    : std::memcmp(&reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr)->sin6_addr,
                                  &reinterpret_cast<sockaddr_in6*>(&from)->sin6_addr, sizeof(in6_addr)) == 0;
    if (same) name = ifa->ifa_name;
  }
  ::freeifaddrs(list);
  return name;
}

std::optional<std::uint64_t> listen_overflows_in(std::string_view netstat) {
  // Pairs of lines: "TcpExt: Name Name ...", then "TcpExt: value value ...".
  auto next_line = [&netstat]() {
    auto end = netstat.find('\n');
    auto line = netstat.substr(0, end);
    netstat.remove_prefix(end == std::string_view::npos ? netstat.size() : end + 1);
    return line;
  };
  auto words = [](std::string_view line) {
    std::vector<std::string_view> out;
    while (!line.empty()) {
      auto start = line.find_first_not_of(' ');
      if (start == std::string_view::npos) break;
      line.remove_prefix(start);
      auto end = line.find(' ');
      out.push_back(line.substr(0, end));
      line.remove_prefix(end == std::string_view::npos ? line.size() : end);
    }
    return out;
  };
  while (!netstat.empty()) {
    auto names = words(next_line());
    auto values = words(next_line());
    if (names.empty() || names[0] != "TcpExt:" || values.size() != names.size()) continue;
    for (std::size_t i = 1; i < names.size(); ++i) {
      if (names[i] != "ListenOverflows") continue;
      std::uint64_t v = 0;
      auto [end, ec] = std::from_chars(values[i].data(), values[i].data() + values[i].size(), v);
      if (ec != std::errc() || end != values[i].data() + values[i].size()) return std::nullopt;
      return v;
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> listen_overflows() {
  std::ifstream in("/proc/net/netstat");
  if (!in) return std::nullopt;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return listen_overflows_in(text);
}

}  // namespace sgpu::rendezvous
