#pragma once
// DeepSpeed's --include/--exclude syntax, which every backend takes:
// "a:0,2@b" (host a's devices 0 and 2, and all of host b), and for the one
// node of a local run ":3". Pure; internal to lib/launcher.
#include <string>
#include <string_view>
#include <vector>

namespace sgpu::launcher {

// One `@`-separated part of a filter: "a", "a:0,2", or ":0,2" (host "").
struct HostFilter {
  std::string host;          // "": this node (a local run)
  std::vector<int> devices;  // empty: the whole host
};

// `flag` names the option in messages ("--exclude").
std::vector<HostFilter> parse_host_filter(std::string_view text, std::string_view flag);

// Host names compare without regard to case, as DNS does.
bool same_host(std::string_view a, std::string_view b);

}  // namespace sgpu::launcher
