#include "sgpu/env/socket_ifname.hpp"

#include <vector>

namespace sgpu::env {
namespace {

constexpr const char* kNcclVar = "NCCL_SOCKET_IFNAME";
constexpr const char* kGlooVar = "GLOO_SOCKET_IFNAME";

std::vector<std::string_view> split_commas(std::string_view text) {
  std::vector<std::string_view> parts;
  while (!text.empty()) {
    auto comma = text.find(',');
    auto part = text.substr(0, comma);
    if (!part.empty()) parts.push_back(part);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return parts;
}

}  // namespace

bool nccl_ifname_selects(std::string_view filter, std::string_view iface) {
  bool exclude = !filter.empty() && filter.front() == '^';
  if (exclude) filter.remove_prefix(1);
  bool exact = !filter.empty() && filter.front() == '=';
  if (exact) filter.remove_prefix(1);
  bool listed = false;
  for (auto name : split_commas(filter))
    if (exact ? iface == name : iface.substr(0, name.size()) == name) listed = true;
  return exclude ? !listed : listed;
}

void pin_socket_interfaces(Environment& env, const std::string& routed) {
  if (routed.empty()) return;
  auto nccl = env.find(kNcclVar);
  auto gloo = env.find(kGlooVar);
  bool has_nccl = nccl != env.end() && !nccl->second.empty();
  bool has_gloo = gloo != env.end() && !gloo->second.empty();
  if (has_nccl && has_gloo) return;
  if (!has_nccl && !has_gloo) {
    env[kNcclVar] = routed;
    env[kGlooVar] = routed;
  } else if (has_nccl) {
    if (nccl_ifname_selects(nccl->second, routed)) env[kGlooVar] = routed;
  } else {
    for (auto name : split_commas(gloo->second))
      if (name == routed) env[kNcclVar] = "=" + routed;
  }
}

}  // namespace sgpu::env
