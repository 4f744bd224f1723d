// DeepSpeed's host filter syntax (host_filter.hpp).
#include "backends/host_filter.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<int> index_of(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

bool same_host(std::string_view a, std::string_view b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
  });
}

std::vector<HostFilter> parse_host_filter(std::string_view text, std::string_view flag) {
  std::vector<HostFilter> out;
  constexpr const char* kValid = "valid: 'a', 'a:0,2', 'a:0,2@b', ':0,2' (this node)";
  if (trim(text).empty()) throw Error(fmt::format("{}: empty filter; {}", flag, kValid));
  for (std::string_view rest = text;;) {
    auto at = rest.find('@');
    auto part = trim(rest.substr(0, at));
    auto where = fmt::format("{} '{}'", flag, text);
    if (part.empty()) throw Error(fmt::format("{}: empty host between '@'; {}", where, kValid));
    HostFilter f;
    std::string_view devices;
    if (part.starts_with('[')) {
      auto close = part.find(']');
      if (close == std::string_view::npos) throw Error(fmt::format("{}: '[' without ']'", where));
      f.host = std::string(part.substr(1, close - 1));
      if (close + 1 < part.size()) {
        if (part[close + 1] != ':') throw Error(fmt::format("{}: expected ':' after ']'; {}", where, kValid));
        devices = part.substr(close + 2);
      }
    } else {
      auto colon = part.find(':');
      f.host = std::string(part.substr(0, colon));
      if (colon != std::string_view::npos) devices = part.substr(colon + 1);
    }
    if (f.host.empty() && devices.empty()) throw Error(fmt::format("{}: a ':' without devices; {}", where, kValid));
    if (part.find(':') != std::string_view::npos && devices.empty())
      throw Error(fmt::format("{}: '{}:' has no devices; {}", where, f.host, kValid));
    while (!devices.empty()) {
      auto comma = devices.find(',');
      auto num = devices.substr(0, comma);
      auto d = index_of(num);
      if (!d || *d < 0)
        throw Error(fmt::format("{}: device '{}' of host '{}' is not a device index (0, 1, ...)", where, num, f.host));
      if (std::find(f.devices.begin(), f.devices.end(), *d) != f.devices.end())
        throw Error(fmt::format("{}: device {} of host '{}' is named twice", where, *d, f.host));
      f.devices.push_back(*d);
      devices.remove_prefix(comma == std::string_view::npos ? devices.size() : comma + 1);
      if (comma != std::string_view::npos && devices.empty())
        throw Error(fmt::format("{}: trailing ',' after the devices of '{}'", where, f.host));
    }
    for (const auto& prev : out)
      if (same_host(prev.host, f.host))
        throw Error(fmt::format("{}: host '{}' is named twice; list all its devices in one part", where, f.host));
    out.push_back(std::move(f));
    if (at == std::string_view::npos) break;
    rest.remove_prefix(at + 1);
  }
  return out;
}

}  // namespace sgpu::launcher
