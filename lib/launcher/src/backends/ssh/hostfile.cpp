// Parsing hostfiles, --hosts and include/exclude filters (hosts.hpp).
#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>

#include <fmt/format.h>

#include "backends/ssh/hosts.hpp"
#include "sgpu/env/error.hpp"

namespace sgpu::launcher::ssh {
namespace {

constexpr int kMaxSlots = 4096;
constexpr const char* kValidLine =
    "valid lines: 'host slots=N', 'user@host slots=N gpu_type=H100 port=22', 'host:N', '# comment'";

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_'; }
bool is_ipv6_char(char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.' || c == '%'; }

std::optional<int> to_int(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// `where` prefixes every message ("hosts:3:1", "--hosts entry 2").
struct HostToken {
  std::string user, host;
  std::optional<int> slots;
};

int parse_slots(std::string_view text, const std::string& where) {
  auto n = to_int(text);
  if (!n || *n < 1 || *n > kMaxSlots)
    throw Error(fmt::format("{}: slot count '{}' is not a number from 1 to {}", where, text, kMaxSlots));
  return *n;
}

void check_host_name(std::string_view host, bool ipv6, const std::string& where) {
  bool ok = !host.empty() && host.front() != '-' && host.front() != '.' &&
            std::all_of(host.begin(), host.end(), ipv6 ? is_ipv6_char : is_name_char);
  if (!ok)
    throw Error(
        fmt::format("{}: '{}' is not a host name or address; valid: letters, digits, '.', '-', '_' (not first), "
                    "or an IPv6 address in brackets",
                    where, host));
}

// "[user@]host[:N]", "[user@][v6addr][:N]", or a bare IPv6 address.
HostToken parse_host_token(std::string_view tok, const std::string& where) {
  HostToken out;
  if (auto at = tok.find('@'); at != std::string_view::npos) {
    out.user = std::string(tok.substr(0, at));
    tok.remove_prefix(at + 1);
    bool ok =
        !out.user.empty() && out.user.front() != '-' && std::all_of(out.user.begin(), out.user.end(), is_name_char);
    if (!ok)
      throw Error(fmt::format("{}: '{}' is not a user name; valid: letters, digits, '.', '-', '_' (not first)", where,
                              out.user));
  }
  std::string_view slots;
  bool ipv6 = false;
  if (tok.starts_with('[')) {
    auto close = tok.find(']');
    if (close == std::string_view::npos) throw Error(fmt::format("{}: '[' without ']' in '{}'", where, tok));
    out.host = std::string(tok.substr(1, close - 1));
    auto rest = tok.substr(close + 1);
    if (!rest.empty()) {
      if (!rest.starts_with(':'))
        throw Error(fmt::format("{}: unexpected '{}' after ']'; write [address]:N for N slots", where, rest));
      slots = rest.substr(1);
      if (slots.empty()) throw Error(fmt::format("{}: ':' without a slot count", where));
    }
    ipv6 = true;
  } else if (std::count(tok.begin(), tok.end(), ':') > 1) {
    out.host = std::string(tok);  // a bare IPv6 address: no room for ":N"
    ipv6 = true;
  } else if (auto colon = tok.find(':'); colon != std::string_view::npos) {
    out.host = std::string(tok.substr(0, colon));
    slots = tok.substr(colon + 1);
    if (slots.empty()) throw Error(fmt::format("{}: ':' without a slot count", where));
  } else {
    out.host = std::string(tok);
  }
  check_host_name(out.host, ipv6, where);
  if (!slots.empty()) out.slots = parse_slots(slots, where);
  return out;
}

HostEntry to_entry(HostToken t, std::string origin) {
  HostEntry e;
  e.user = std::move(t.user);
  e.host = std::move(t.host);
  e.slots = t.slots;
  e.origin = std::move(origin);
  return e;
}

void apply_key(HostEntry& e, std::string_view key, std::string_view value, bool slots_from_colon,
               const std::string& where) {
  if (value.empty()) throw Error(fmt::format("{}: '{}=' has no value", where, key));
  if (key == "slots") {
    if (slots_from_colon) throw Error(fmt::format("{}: the slot count is given twice (':N' and 'slots=')", where));
    e.slots = parse_slots(value, where);
  } else if (key == "max_slots" || key == "max-slots") {
    parse_slots(value, where);  // OpenMPI's oversubscription limit: checked, not needed
  } else if (key == "gpu_type" || key == "gpu-type") {
    if (!std::all_of(value.begin(), value.end(), is_name_char))
      throw Error(fmt::format("{}: gpu_type '{}' is not a GPU type like H100 or A100", where, value));
    e.gpu_type = std::string(value);
  } else if (key == "port") {
    auto p = to_int(value);
    if (!p || *p < 1 || *p > 65535) throw Error(fmt::format("{}: port '{}' is not from 1 to 65535", where, value));
    e.port = *p;
  } else {
    throw Error(fmt::format("{}: unknown key '{}'; valid keys: slots, max_slots, gpu_type, port", where, key));
  }
}

// Keeps the first entry of each host (case-insensitive) and names both places.
void check_unique(const std::vector<HostEntry>& hosts, const std::vector<std::string>& where_of) {
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < hosts.size(); ++i) {
    auto [it, fresh] = seen.emplace(lower(hosts[i].host), i);
    if (!fresh)
      throw Error(fmt::format("{}: host '{}' is listed twice (first at {}); give each host once, with all its slots",
                              where_of[i], hosts[i].host, hosts[it->second].origin));
  }
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<HostEntry> parse_hostfile(std::string_view text, std::string_view path) {
  std::vector<HostEntry> hosts;
  std::vector<std::string> where_of;
  int line_no = 0;
  while (!text.empty()) {
    ++line_no;
    auto nl = text.find('\n');
    auto line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    std::vector<std::pair<std::string_view, int>> tokens;  // token, 1-based column
    for (std::size_t i = 0; i < line.size();) {
      if (std::isspace(static_cast<unsigned char>(line[i]))) {
        ++i;
        continue;
      }
      auto j = i;
      while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
      tokens.emplace_back(line.substr(i, j - i), static_cast<int>(i) + 1);
      i = j;
    }
    if (tokens.empty()) continue;
    auto where = [&](int col) { return fmt::format("{}:{}:{}", path, line_no, col); };
    auto tok = parse_host_token(tokens[0].first, where(tokens[0].second));
    bool slots_from_colon = tok.slots.has_value();
    auto entry = to_entry(std::move(tok), fmt::format("{}:{}", path, line_no));
    std::vector<std::string_view> keys_seen;
    for (std::size_t t = 1; t < tokens.size(); ++t) {
      auto [word, col] = tokens[t];
      auto eq = word.find('=');
      if (eq == std::string_view::npos)
        throw Error(fmt::format("{}: expected key=value after the host, got '{}'; {}", where(col), word, kValidLine));
      auto key = word.substr(0, eq);
      if (std::find(keys_seen.begin(), keys_seen.end(), key) != keys_seen.end())
        throw Error(fmt::format("{}: '{}' is given twice for this host", where(col), key));
      keys_seen.push_back(key);
      apply_key(entry, key, word.substr(eq + 1), slots_from_colon, where(col));
    }
    where_of.push_back(where(tokens[0].second));
    hosts.push_back(std::move(entry));
  }
  check_unique(hosts, where_of);
  return hosts;
}

std::vector<HostEntry> parse_hosts_list(std::string_view text, std::string_view flag) {
  std::vector<HostEntry> hosts;
  std::vector<std::string> where_of;
  if (trim(text).empty()) throw Error(fmt::format("{}: no hosts given; valid: a:8,b:8 or alice@a:4,b", flag));
  int index = 0;
  for (std::string_view rest = text;;) {
    ++index;
    auto comma = rest.find(',');
    auto part = trim(rest.substr(0, comma));
    auto where = fmt::format("{} '{}', entry {}", flag, text, index);
    if (part.empty()) throw Error(fmt::format("{}: empty entry; valid: a:8,b:8 or alice@a:4,b", where));
    hosts.push_back(to_entry(parse_host_token(part, where), fmt::format("{} entry {}", flag, index)));
    where_of.push_back(where);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  check_unique(hosts, where_of);
  return hosts;
}

}  // namespace sgpu::launcher::ssh
