#include "sgpu/rendezvous/host_info.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>
#include <algorithm>
#include <cstring>

namespace sgpu::rendezvous {

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
    char text[INET6_ADDRSTRLEN] = {};
    if (ifa->ifa_addr->sa_family == AF_INET) {
      auto* a = reinterpret_cast<sockaddr_in*>(ifa->ifa_addr);
      if (::inet_ntop(AF_INET, &a->sin_addr, text, sizeof text) != nullptr) v4.emplace_back(text);
    } else if (ifa->ifa_addr->sa_family == AF_INET6) {
      auto* a = reinterpret_cast<sockaddr_in6*>(ifa->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&a->sin6_addr)) continue;
      if (::inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text) != nullptr) v6.emplace_back(text);
    }
  }
  ::freeifaddrs(list);
  v4.insert(v4.end(), v6.begin(), v6.end());
  v4.erase(std::unique(v4.begin(), v4.end()), v4.end());
  if (v4.size() > 64) v4.resize(64);
  return v4;
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
  ::close(fd);
  if (!routed) return "";
  // The source address the kernel chose is on the interface the traffic leaves by.
  std::string name;
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

}  // namespace sgpu::rendezvous
