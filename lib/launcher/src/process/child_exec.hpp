#pragma once
// A child's argv and environment in the form exec wants, made before the
// clone (nothing may allocate in the child). Internal to lib/launcher.
#include <cstddef>
#include <string>
#include <vector>

#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

// "NAME=value" strings for exec, packed in one block, and their pointers,
// null-terminated: two allocations a child, not one or two a variable.
class ExecEnvironment {
 public:
  // `overrides` win over `environment`'s entries of the same names.
  explicit ExecEnvironment(const env::Environment& environment, const env::Environment& overrides = {}) {
    std::size_t size = 0;
    for (const auto* map : {&environment, &overrides})
      for (const auto& [k, v] : *map) size += k.size() + v.size() + 2;
    block_.reserve(size);  // no reallocation below: the pointers stay valid
    std::vector<std::size_t> starts;
    starts.reserve(environment.size() + overrides.size());
    auto add = [&](const std::string& k, const std::string& v) {
      starts.push_back(block_.size());
      block_.append(k).append(1, '=').append(v).append(1, '\0');
    };
    for (const auto& [k, v] : environment)
      if (!overrides.contains(k)) add(k, v);
    for (const auto& [k, v] : overrides) add(k, v);
    pointers_.reserve(starts.size() + 1);
    for (auto start : starts) pointers_.push_back(block_.data() + start);
    pointers_.push_back(nullptr);
  }
  ExecEnvironment(const ExecEnvironment&) = delete;  // the pointers point into this block
  ExecEnvironment& operator=(const ExecEnvironment&) = delete;
  const char* const* envp() const { return pointers_.data(); }

 private:
  std::string block_;
  std::vector<const char*> pointers_;
};

// The strings' pointers, null-terminated; valid while `strings` lives.
inline std::vector<const char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<const char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(s.c_str());
  out.push_back(nullptr);
  return out;
}

}  // namespace sgpu::launcher
