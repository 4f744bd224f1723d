// TOML sources of a job spec: the --config file, and --set values written in
// TOML syntax. The only file that includes toml++.
#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "sgpu/launcher/spec/spec_load.hpp"

namespace sgpu::launcher {
namespace {

constexpr std::uintmax_t kMaxSpecFileBytes = 1 << 20;

// As TOML writes it: control characters (a NUL, an escape) escaped, so that
// a message shows them and never sends them to the terminal.
std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      out += fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  return out + "\"";
}

// The value as a user would write it in the file, for messages.
std::string toml_text(const toml::node& node) {
  if (const auto* s = node.as_string()) return quoted(s->get());
  if (const auto* a = node.as_array()) {
    std::string out;
    for (const auto& item : *a) out += (out.empty() ? "" : ", ") + toml_text(item);
    return "[" + out + "]";
  }
  std::ostringstream os;
  node.visit([&](const auto& n) { os << n; });
  return os.str();
}

std::string kind_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date or time";
  }
}

// Converts one TOML value to a Setting of `key`, or adds an error.
void add_value(Layer& layer, const KeyInfo& key, std::string path, const toml::node& node, Origin origin) {
  Setting s{std::move(path), std::string(), toml_text(node), std::move(origin)};
  auto mismatch = [&](const std::string& expected, const char* hint = "") {
    layer.errors.push_back(fmt::format("{}: expected {}, got {}{}", s.where(), expected, kind_name(node), hint));
  };
  switch (key.kind) {
    case ValueKind::String:
    case ValueKind::Choice:
      if (!node.is_string()) return mismatch(describe_kind(key));
      s.value = node.as_string()->get();
      break;
    case ValueKind::Int:
    case ValueKind::NodeCount:
      if (!node.is_integer()) return mismatch(describe_kind(key));
      s.value = node.as_integer()->get();
      break;
    case ValueKind::RankCount:
      if (node.is_integer())
        s.value = node.as_integer()->get();
      else if (node.is_string())
        s.value = node.as_string()->get();
      else
        return mismatch(describe_kind(key));
      break;
    case ValueKind::Bool:
      if (!node.is_boolean()) return mismatch("true or false");
      s.value = node.as_boolean()->get();
      break;
    case ValueKind::StringList: {
      if (!node.is_array()) return mismatch(describe_kind(key));
      std::vector<std::string> items;
      for (const auto& item : *node.as_array()) {
        if (!item.is_string()) {
          layer.errors.push_back(fmt::format("{}: every item must be a string (write \"{}\" in quotes), got {}",
                                             s.where(), toml_text(item), kind_name(item)));
          return;
        }
        items.push_back(item.as_string()->get());
      }
      s.value = std::move(items);
      break;
    }
    case ValueKind::Duration:
      if (node.is_string()) {
        s.value = node.as_string()->get();
      } else if (node.is_integer() || node.is_floating_point()) {
        double seconds =
            node.is_integer() ? static_cast<double>(node.as_integer()->get()) : node.as_floating_point()->get();
        if (!(seconds > 0)) {
          layer.errors.push_back(
              fmt::format("{}: must be a positive number of seconds, or \"none\" for no limit", s.where()));
          return;
        }
        s.value = fmt::format("{}", seconds);
      } else if (node.is_time()) {
        const auto& t = node.as_time()->get();  // timeout = 02:30:00
        s.value = fmt::format("{}h{}m{}s", t.hour, t.minute, t.second);
      } else {
        return mismatch(describe_kind(key));
      }
      break;
    case ValueKind::StringMap:
      if (node.is_string())
        s.value = node.as_string()->get();
      else if (node.is_integer())
        s.value = std::to_string(node.as_integer()->get());  // OMP_NUM_THREADS = 4
      else
        return mismatch("a string or an integer", "; write it in quotes");
      break;
  }
  if (auto problem = check_setting(key, s); !problem.empty())
    layer.errors.push_back(std::move(problem));
  else
    layer.settings.push_back(std::move(s));
}

// toml++ keeps keys sorted by name; visit them as written, so that errors
// come in file order.
std::vector<std::pair<const toml::key*, const toml::node*>> in_file_order(const toml::table& table) {
  std::vector<std::pair<const toml::key*, const toml::node*>> entries;
  for (const auto& [k, node] : table) entries.emplace_back(&k, &node);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    const auto& pa = a.first->source().begin;
    const auto& pb = b.first->source().begin;
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  return entries;
}

struct FileReader {
  const std::string& path;
  Layer& layer;

  Origin at(const toml::source_region& r) const {
    return {Origin::Kind::File, path, static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
  }
  std::string pos(const toml::source_region& r) const {
    return fmt::format("{}:{}:{}", path, r.begin.line, r.begin.column);
  }

  void walk(const toml::table& table, const std::string& prefix) {
    for (const auto& [key_ptr, node_ptr] : in_file_order(table)) {
      const toml::key& k = *key_ptr;
      const toml::node& node = *node_ptr;
      if (std::any_of(k.str().begin(), k.str().end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; })) {
        layer.errors.push_back(fmt::format("{}: the key {} holds a control character; no key of the job spec does",
                                           pos(k.source()), quoted(std::string(k.str()))));
        continue;
      }
      std::string full = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      const KeyInfo* key = find_key(full);
      if (key && key->kind == ValueKind::StringMap) {
        if (!node.is_table()) {
          layer.errors.push_back(
              fmt::format("{}: {} must be a table: [{}] with NAME = \"value\" lines", pos(k.source()), full, full));
          continue;
        }
        for (const auto& [name, value] : in_file_order(*node.as_table()))
          add_value(layer, *key, full + "." + std::string(name->str()), *value, at(value->source()));
      } else if (key) {
        add_value(layer, *key, full, node, at(node.source()));
      } else if (is_spec_table(full)) {
        if (node.is_table())
          walk(*node.as_table(), full);
        else
          layer.errors.push_back(fmt::format("{}: {} is a table ([{}]), not a value", pos(k.source()), full, full));
      } else {
        layer.errors.push_back(fmt::format("{}: {}", pos(k.source()), unknown_key_message(full, node.is_table())));
      }
    }
  }
};

}  // namespace

Layer file_layer(std::string_view text, const std::string& path) {
  Layer layer;
  try {
    auto root = toml::parse(text, path);
    FileReader{path, layer}.walk(root, "");
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    layer.errors.push_back(
        fmt::format("{}:{}:{}: TOML syntax error: {}", path, where.line, where.column, e.description()));
  }
  return layer;
}

Layer read_spec_file(const std::string& path) {
  Layer layer;
  // A spec is a small regular file: a directory reads as empty, /dev/zero never ends, a FIFO may never open.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    layer.errors.push_back(fmt::format("--config {}: cannot read it: {}", path, std::strerror(errno)));
    return layer;
  }
  if (!S_ISREG(st.st_mode)) {
    layer.errors.push_back(fmt::format("--config {}: {}; give a TOML file (configs/ has examples)", path,
                                       S_ISDIR(st.st_mode) ? "is a directory" : "is not a regular file"));
    return layer;
  }
  if (static_cast<std::uintmax_t>(st.st_size) > kMaxSpecFileBytes) {
    layer.errors.push_back(
        fmt::format("--config {}: {} bytes; a job spec is at most {} KiB", path, st.st_size, kMaxSpecFileBytes >> 10));
    return layer;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    layer.errors.push_back(fmt::format("--config {}: cannot read it: {}", path, std::strerror(errno)));
    return layer;
  }
  std::string content(kMaxSpecFileBytes + 1, '\0');
  in.read(content.data(), static_cast<std::streamsize>(content.size()));
  content.resize(static_cast<std::size_t>(in.gcount()));
  if (content.size() > kMaxSpecFileBytes) {
    layer.errors.push_back(fmt::format("--config {}: a job spec is at most {} KiB", path, kMaxSpecFileBytes >> 10));
    return layer;
  }
  return file_layer(content, path);
}

Layer set_layer(const std::vector<std::string>& assignments) {
  Layer layer;
  for (const auto& a : assignments) {
    auto eq = a.find('=');
    if (eq == std::string::npos || eq == 0) {
      layer.errors.push_back(fmt::format("--set {}: expected path.to.key=value, e.g. --set resources.gpus=8", a));
      continue;
    }
    std::string path = a.substr(0, eq), text = a.substr(eq + 1);
    const KeyInfo* key = find_key(path);
    if (key == nullptr || (key->kind == ValueKind::StringMap && path == key->path)) {
      bool table = key != nullptr || is_spec_table(path);
      layer.errors.push_back(
          table ? fmt::format("--set {}: {} is a table; set one of its keys, e.g. --set {}.NAME=value", a, path, path)
                : fmt::format("--set {}: {}", a, unknown_key_message(path)));
      continue;
    }
    Origin origin{Origin::Kind::Set, "--set"};
    if (!text.empty() && (text[0] == '"' || text[0] == '\'' || text[0] == '[')) {
      // TOML syntax: a quoted string or an array, read by the same rules as a file.
      try {
        auto doc = toml::parse("v = " + text, std::string_view("--set"));
        Layer one;
        add_value(one, *key, path, *doc.get("v"), origin);
        for (auto& s : one.settings) s.text = text;
        layer.settings.insert(layer.settings.end(), one.settings.begin(), one.settings.end());
        layer.errors.insert(layer.errors.end(), one.errors.begin(), one.errors.end());
      } catch (const toml::parse_error& e) {
        layer.errors.push_back(fmt::format("--set {}: not a TOML value: {}", a, e.description()));
      }
      continue;
    }
    auto made = setting_from_text(*key, path, text, origin);
    if (auto* error = std::get_if<std::string>(&made)) {
      layer.errors.push_back(std::move(*error));
      continue;
    }
    auto& s = std::get<Setting>(made);
    if (auto problem = check_setting(*key, s); !problem.empty())
      layer.errors.push_back(std::move(problem));
    else
      layer.settings.push_back(std::move(s));
  }
  return layer;
}

}  // namespace sgpu::launcher
