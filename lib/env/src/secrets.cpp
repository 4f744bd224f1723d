#include "sgpu/env/secrets.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace sgpu::env {
namespace {

// Anywhere in the name.
constexpr std::array<std::string_view, 13> kParts = {"TOKEN",      "SECRET", "PASSWORD", "PASSWD",  "KEY",
                                                     "CREDENTIAL", "CRED",   "AUTH",     "PRIVATE", "COOKIE",
                                                     "SESSION",    "NETRC",  "WEBHOOK"};
// Only as a whole word: "PAT" is in PATH, "PWD" is the working directory.
constexpr std::array<std::string_view, 3> kWords = {"PAT", "PWD", "DSN"};
// At the end of a word: SSHPASS, DB_PASS, --pass; not --passes or PASSPORT.
constexpr std::array<std::string_view, 1> kWordEnds = {"PASS"};
constexpr std::array<std::string_view, 2> kNotSecret = {"PWD", "OLDPWD"};

std::string upper(std::string_view name) {
  std::string out(name);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// Whether a word of `name` (between '_', '-' and '.') is `word`, or ends
// with it when `at_end`.
bool has_word(std::string_view name, std::string_view word, bool at_end) {
  std::size_t start = 0;
  while (start <= name.size()) {
    auto end = name.find_first_of("_-.", start);
    if (end == std::string_view::npos) end = name.size();
    auto w = name.substr(start, end - start);
    if (at_end ? w.ends_with(word) : w == word) return true;
    start = end + 1;
  }
  return false;
}

// "db.password" of "db.password=x", "api-key" of "--api-key=x"; "" when the
// argument names no option (a path, a sentence).
std::string_view option_name(std::string_view arg) {
  auto name = arg.substr(0, arg.find('='));
  while (name.starts_with('-')) name.remove_prefix(1);
  bool word = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  return word ? name : std::string_view();
}

}  // namespace

bool is_secret_name(std::string_view name) {
  auto up = upper(name);
  if (std::find(kNotSecret.begin(), kNotSecret.end(), up) != kNotSecret.end()) return false;
  for (auto part : kParts)
    if (up.find(part) != std::string::npos) return true;
  for (auto word : kWords)
    if (has_word(up, word, false)) return true;
  for (auto end : kWordEnds)
    if (has_word(up, end, true)) return true;
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

std::vector<std::string> mask_arguments(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  bool next_is_secret = false;
  for (const auto& arg : args) {
    if (next_is_secret) {
      out.emplace_back("****");
      next_is_secret = false;
      continue;
    }
    auto eq = arg.find('=');
    bool flag = arg.starts_with('-');
    auto name = option_name(arg);
    if (!name.empty() && is_secret_name(name) && (flag || eq != std::string::npos)) {
      if (eq == std::string::npos) {
        out.push_back(arg);  // "--token x": the next word is the value
        next_is_secret = true;
      } else {
        out.push_back(arg.substr(0, eq + 1) + "****");
      }
      continue;
    }
    out.push_back(mask_secret("", arg));
  }
  return out;
}

}  // namespace sgpu::env
