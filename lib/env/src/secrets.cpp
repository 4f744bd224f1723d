#include "sgpu/env/secrets.hpp"

#include <array>
#include <cctype>

namespace sgpu::env {

bool is_secret_name(std::string_view name) {
  std::string upper(name);
  for (auto& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static constexpr std::array<std::string_view, 10> kWords = {"TOKEN",      "SECRET", "PASSWORD", "PASSWD", "KEY",
                                                              "CREDENTIAL", "AUTH",   "PRIVATE",  "COOKIE", "SESSION"};
  for (auto w : kWords)
    if (upper.find(w) != std::string::npos) return true;
  return false;
}

std::string mask_secret(std::string_view name, std::string_view value) {
  if (is_secret_name(name)) return value.empty() ? std::string() : std::string("****");
  // scheme://user:password@host: keep the user and host, hide the password.
  std::string out(value);
  std::size_t from = 0;
  while (true) {
    auto scheme = out.find("://", from);
    if (scheme == std::string::npos) break;
    auto start = scheme + 3;
    auto end = out.find_first_of("/?# ", start);
    if (end == std::string::npos) end = out.size();
    std::string_view authority(out.data() + start, end - start);
    auto at = authority.rfind('@');
    auto colon = authority.find(':');
    if (at != std::string_view::npos && colon < at) out.replace(start + colon + 1, at - colon - 1, "****");
    from = start;
  }
  return out;
}

}  // namespace sgpu::env
