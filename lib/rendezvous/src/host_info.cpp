#include "sgpu/rendezvous/host_info.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>
#include <algorithm>

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

}  // namespace sgpu::rendezvous
