#pragma once
// A child's argv and environment in the form exec wants, made before the
// clone (nothing may allocate in the child). Internal to lib/launcher.
#include <string>
#include <vector>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

// "NAME=value" strings for exec.
inline std::vector<std::string> environment_strings(const env::Environment& environment) {
  std::vector<std::string> out;
  out.reserve(environment.size());
  for (const auto& [k, v] : environment) out.push_back(k + "=" + v);
  return out;
}

// The strings' pointers, null-terminated; valid while `strings` lives.
inline std::vector<const char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<const char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(s.c_str());
  out.push_back(nullptr);
  return out;
}

}  // namespace sgpu::launcher
