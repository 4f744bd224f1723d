#include "sgpu/launcher/spec/spec_schema.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>

#include <fmt/format.h>

#include "sgpu/env/duration.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/env/suggest.hpp"

namespace sgpu::launcher {
namespace {

// sgpu's own keys, then each backend's table as the backend registry adds it.
std::vector<KeyInfo>& schema() {
  static std::vector<KeyInfo> keys = core_spec_keys();
  return keys;
}

std::string quoted_list(const std::vector<std::string_view>& words) {
  std::string out;
  for (auto w : words) out += fmt::format("{}\"{}\"", out.empty() ? "" : ", ", w);
  return out;
}

std::string plain_list(const std::vector<std::string_view>& words) {
  std::string out;
  for (auto w : words) out += fmt::format("{}{}", out.empty() ? "" : ", ", w);
  return out;
}

std::string_view table_of(std::string_view path) {
  auto dot = path.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : path.substr(0, dot);
}

std::string_view leaf_of(std::string_view path) {
  auto dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

std::vector<std::string> top_tables() {
  std::vector<std::string> out;
  for (const auto& k : spec_keys()) {
    std::string top(k.path.substr(0, k.path.find('.')));
    if (std::find(out.begin(), out.end(), top) == out.end()) out.push_back(top);
  }
  return out;
}

}  // namespace

const std::vector<KeyInfo>& spec_keys() { return schema(); }

void add_backend_keys(std::string_view backend, std::vector<KeyInfo> keys) {
  auto& all = schema();
  for (auto& k : all) {
    if (k.path == "resources.backend" && std::find(k.choices.begin(), k.choices.end(), backend) == k.choices.end())
      k.choices.push_back(backend);
  }
  for (auto& k : keys) {
    k.backend = backend;
    all.push_back(std::move(k));
  }
}

namespace {

std::optional<std::int64_t> parse_int(std::string_view text) {
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size()) return std::nullopt;
  return v;
}

std::string range_text(const KeyInfo& key) {
  return key.max > key.min ? fmt::format(" from {} to {}", key.min, key.max) : "";
}

bool has_nul(const Setting& s) {
  auto nul = [](const std::string& text) { return text.find('\0') != std::string::npos; };
  if (const auto* text = std::get_if<std::string>(&s.value)) return nul(*text);
  if (const auto* list = std::get_if<std::vector<std::string>>(&s.value))
    return std::any_of(list->begin(), list->end(), nul);
  return false;
}

bool valid_env_name(std::string_view name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

}  // namespace

std::optional<CpuBind> parse_cpu_bind(std::string_view text) {
  if (text == "none") return CpuBind::None;
  if (text == "numa" || text == "node") return CpuBind::Numa;
  if (text == "socket") return CpuBind::Socket;
  if (text == "core") return CpuBind::Core;
  if (text == "exclusive") return CpuBind::Exclusive;
  return std::nullopt;
}

std::string_view cpu_bind_name(CpuBind mode) {
  switch (mode) {
    case CpuBind::None:
      return "none";
    case CpuBind::Numa:
      return "numa";
    case CpuBind::Socket:
      return "socket";
    case CpuBind::Core:
      return "core";
    case CpuBind::Exclusive:
      return "exclusive";
  }
  return "none";
}

std::string where_set(const JobSpec& spec, std::string_view key, const std::string& fallback) {
  auto it = spec.origins.find(key);
  return it == spec.origins.end() ? fallback : it->second;
}

std::string Setting::subject() const {
  switch (origin.kind) {
    case Origin::Kind::File:
      return fmt::format("{}:{}:{}: {}", origin.name, origin.line, origin.column, key);
    case Origin::Kind::Set:
      return fmt::format("--set {}", key);
    case Origin::Kind::Environment:
    case Origin::Kind::Flag:
      break;
  }
  return origin.name;
}

std::string Setting::where() const {
  switch (origin.kind) {
    case Origin::Kind::File:
      return fmt::format("{} = {}", subject(), text);
    case Origin::Kind::Set:
      return fmt::format("--set {}={}", key, text);
    case Origin::Kind::Environment:
      return fmt::format("{}={}", origin.name, text);
    case Origin::Kind::Flag:
      break;
  }
  return std::holds_alternative<bool>(value) ? origin.name : fmt::format("{} {}", origin.name, text);
}

std::string Setting::label() const {
  if (origin.kind == Origin::Kind::File)
    return fmt::format("{} ({}:{}:{})", key, origin.name, origin.line, origin.column);
  return subject();
}

const KeyInfo* find_key(std::string_view path) {
  for (const auto& k : spec_keys()) {
    if (k.path == path) return &k;
    if (k.kind == ValueKind::StringMap && path.size() > k.path.size() && path.starts_with(k.path) &&
        path[k.path.size()] == '.')
      return &k;
  }
  return nullptr;
}

bool is_spec_table(std::string_view path) {
  for (const auto& k : spec_keys())
    if (k.path.size() > path.size() && k.path.starts_with(path) && k.path[path.size()] == '.') return true;
  return false;
}

std::string unknown_key_message(std::string_view path, bool is_table) {
  std::vector<std::string> candidates;
  for (const auto& k : spec_keys()) {
    candidates.emplace_back(k.path);
    for (auto t = table_of(k.path); !t.empty(); t = table_of(t))
      if (std::find(candidates.begin(), candidates.end(), t) == candidates.end()) candidates.emplace_back(t);
  }
  auto table = table_of(path);
  auto leaf = leaf_of(path);
  // The same name in another table is the likeliest mistake ("job.gpus").
  std::string hint;
  for (const auto& k : spec_keys())
    if (leaf_of(k.path) == leaf && k.path != path) hint = std::string(k.path);
  if (hint.empty()) hint = env::closest_match(path, candidates);
  if (!hint.empty() && is_spec_table(hint)) hint = fmt::format("[{}]", hint);
  std::string msg = is_table ? fmt::format("unknown table [{}]", path) : fmt::format("unknown key '{}'", path);
  if (!hint.empty()) msg += fmt::format("; did you mean {}?", hint.front() == '[' ? hint : "'" + hint + "'");
  if (!table.empty() && is_spec_table(table)) {
    std::string keys;
    for (const auto& k : spec_keys())
      if (table_of(k.path) == table) keys += fmt::format("{}{}", keys.empty() ? "" : ", ", leaf_of(k.path));
    for (const auto& c : candidates)
      if (table_of(c) == table && is_spec_table(c)) keys += fmt::format(", [{}]", c);
    return msg + fmt::format(" Valid keys in [{}]: {}", table, keys);
  }
  std::string tables;
  for (const auto& t : top_tables()) tables += fmt::format("{}[{}]", tables.empty() ? "" : ", ", t);
  return msg + fmt::format(" Valid tables: {}", tables);
}

std::string describe_kind(const KeyInfo& key) {
  switch (key.kind) {
    case ValueKind::String:
      return "a string";
    case ValueKind::Int:
      return "an integer" + range_text(key);
    case ValueKind::Bool:
      return "true or false";
    case ValueKind::StringList:
      return "an array of strings, e.g. [\"a\", \"b\"]";
    case ValueKind::Duration:
      return fmt::format("a duration such as \"90m\", \"2h30m\" or a number of seconds{}",
                         key.none_ok ? ", or \"none\"" : "");
    case ValueKind::Choice:
      return "one of " + quoted_list(key.choices);
    case ValueKind::RankCount:
      return fmt::format("a number of ranks{}, or one of {}", range_text(key), quoted_list(key.choices));
    case ValueKind::NodeCount:
      return "a number of nodes" + range_text(key);
    case ValueKind::StringMap:
      return "a table of NAME = \"value\"";
  }
  return "a value";
}

std::variant<Setting, std::string> setting_from_text(const KeyInfo& key, std::string key_path, std::string text,
                                                     Origin origin) {
  Setting s{std::move(key_path), std::string(), text, std::move(origin)};
  auto wrong = [&](const std::string& why) { return fmt::format("{}: {}", s.where(), why); };
  switch (key.kind) {
    case ValueKind::Int:
    case ValueKind::NodeCount: {
      auto n = parse_int(text);
      // torchrun's --nnodes MIN:MAX: only a fixed size, MIN == MAX, is meaningful here.
      if (auto colon = text.find(':'); !n && key.kind == ValueKind::NodeCount && colon != std::string::npos) {
        auto lo = parse_int(std::string_view(text).substr(0, colon));
        auto hi = parse_int(std::string_view(text).substr(colon + 1));
        if (lo && hi && *lo != *hi) return wrong("elastic node ranges are not supported; give one number of nodes");
        n = lo && hi ? lo : std::nullopt;
      }
      if (!n) return wrong("expected " + describe_kind(key));
      s.value = *n;
      break;
    }
    case ValueKind::RankCount:
      if (auto n = parse_int(text))
        s.value = *n;
      else
        s.value = text;
      break;
    case ValueKind::Bool:
      if (text == "true" || text == "1")
        s.value = true;
      else if (text == "false" || text == "0")
        s.value = false;
      else
        return wrong("expected true or false");
      break;
    case ValueKind::StringList: {
      std::vector<std::string> items;
      std::size_t start = 0;
      while (!text.empty() && start <= text.size()) {
        auto comma = text.find(',', start);
        if (comma == std::string::npos) comma = text.size();
        items.push_back(text.substr(start, comma - start));
        start = comma + 1;
      }
      s.value = std::move(items);
      break;
    }
    case ValueKind::String:
    case ValueKind::Duration:
    case ValueKind::Choice:
    case ValueKind::StringMap:
      s.value = text;
      break;
  }
  return s;
}

std::string check_setting(const KeyInfo& key, const Setting& s) {
  auto wrong = [&](const std::string& why) { return fmt::format("{}: {}", s.where(), why); };
  // TOML can spell a NUL ("\u0000"), but no variable, argument or path can
  // hold one: the rank would get the text cut short at it.
  if (has_nul(s)) return wrong("contains a NUL character (\\u0000), which no variable, argument or path can hold");
  const auto* n = std::get_if<std::int64_t>(&s.value);
  const auto* text = std::get_if<std::string>(&s.value);
  switch (key.kind) {
    case ValueKind::Int:
    case ValueKind::NodeCount:
    case ValueKind::RankCount:
      if (n && key.max > key.min && (*n < key.min || *n > key.max))
        return wrong(fmt::format("must be between {} and {}", key.min, key.max));
      if (text && key.kind == ValueKind::RankCount &&
          std::find(key.choices.begin(), key.choices.end(), *text) == key.choices.end())
        return wrong(fmt::format("expected a number of ranks, or {}", plain_list(key.choices)));
      break;
    case ValueKind::Choice:
      if (text && std::find(key.choices.begin(), key.choices.end(), *text) == key.choices.end()) {
        std::vector<std::string> options(key.choices.begin(), key.choices.end());
        auto near = env::closest_match(*text, options);
        return wrong(fmt::format("expected one of {}{}", quoted_list(key.choices),
                                 near.empty() ? "" : fmt::format(" (did you mean \"{}\"?)", near)));
      }
      break;
    case ValueKind::Duration:
      try {
        if (!env::parse_duration(*text, s.subject(), key.none_ok) && !key.none_ok)
          return wrong("needs a limit, e.g. 30s; \"none\" is not allowed here");
      } catch (const Error& e) {
        return e.what();
      }
      break;
    case ValueKind::StringMap: {
      auto name = std::string_view(s.key).substr(key.path.size() + 1);
      if (!valid_env_name(name))
        return wrong(
            fmt::format("'{}' is not a variable name (letters, digits and _, not starting with a digit)", name));
      if (env::is_launcher_variable(name))
        return wrong(fmt::format("sgpu sets {} itself for every rank; it cannot be set in [env]", name));
      break;
    }
    case ValueKind::String:
    case ValueKind::Bool:
    case ValueKind::StringList:
      break;
  }
  return {};
}

std::int64_t as_int(const Setting& s) { return std::get<std::int64_t>(s.value); }
const std::string& as_string(const Setting& s) { return std::get<std::string>(s.value); }
bool as_bool(const Setting& s) { return std::get<bool>(s.value); }
const std::vector<std::string>& as_list(const Setting& s) { return std::get<std::vector<std::string>>(s.value); }

}  // namespace sgpu::launcher
