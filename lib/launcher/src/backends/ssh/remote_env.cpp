// The environment forwarded to remote nodes (remote_env.hpp).
#include "backends/ssh/remote_env.hpp"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher::ssh {
namespace {

bool valid_name(std::string_view name) {
  auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  return !name.empty() && !std::isdigit(static_cast<unsigned char>(name.front())) &&
         std::all_of(name.begin(), name.end(), word);
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

bool forwarded_by_default(std::string_view name) {
  constexpr std::array<std::string_view, 4> names = {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "VIRTUAL_ENV"};
  constexpr std::array<std::string_view, 4> prefixes = {"CUDA_", "NCCL_", "MLFLOW_", "HF_"};
  if (name == "CUDA_VISIBLE_DEVICES") return false;
  if (std::find(names.begin(), names.end(), name) != names.end()) return true;
  return std::any_of(prefixes.begin(), prefixes.end(), [&](auto p) { return name.starts_with(p); });
}

std::pair<std::string, std::string> parse_env_assignment(std::string_view text, const env::Environment& inherited,
                                                         std::string_view where) {
  auto eq = text.find('=');
  auto name = text.substr(0, eq);
  if (!valid_name(name))
    throw Error(
        fmt::format("{} '{}': '{}' is not a variable name; valid: NAME or NAME=value, NAME of letters, "
                    "digits and '_' not starting with a digit",
                    where, text, name));
  if (eq != std::string_view::npos) return {std::string(name), std::string(text.substr(eq + 1))};
  auto it = inherited.find(std::string(name));
  if (it == inherited.end())
    throw Error(fmt::format("{} {}: {} is not set here, so there is no value to forward; give {}=value", where, name,
                            name, name));
  return *it;
}

env::Environment parse_env_file(std::string_view text, std::string_view path, const env::Environment& inherited) {
  env::Environment out;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    auto nl = text.find('\n');
    auto line = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty() || line.front() == '#') continue;
    if (line.starts_with("export ") || line.starts_with("export\t")) line = trim(line.substr(7));
    auto where = fmt::format("--env-file {}:{}", path, line_no);
    if (line.find('\0') != std::string_view::npos)
      throw Error(fmt::format("{}: holds a NUL byte, which no variable can hold", where));
    auto eq = line.find('=');
    std::string assignment(line);
    if (eq != std::string_view::npos) {
      auto value = line.substr(eq + 1);
      if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front())
        value = value.substr(1, value.size() - 2);
      assignment = std::string(line.substr(0, eq)) + "=" + std::string(value);
    }
    auto [name, value] = parse_env_assignment(assignment, inherited, where);
    out[name] = value;
  }
  return out;
}

env::Environment remote_environment(const env::Environment& inherited, const RemoteEnvSources& sources) {
  env::Environment out;
  for (const auto& [k, v] : inherited)
    if (forwarded_by_default(k)) out[k] = v;
  for (const auto& [k, v] : sources.spec_env) out[k] = v;
  for (const auto& file : sources.env_files)
    for (const auto& [k, v] : file) out[k] = v;
  for (const auto& x : sources.x_flags) {
    auto [k, v] = parse_env_assignment(x, inherited, "-x");
    out[k] = v;
  }
  return out;
}

}  // namespace sgpu::launcher::ssh
