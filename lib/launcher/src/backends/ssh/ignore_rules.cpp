// .gitignore-style rules for --sync (ignore_rules.hpp).
#include "backends/ssh/ignore_rules.hpp"

namespace sgpu::launcher::ssh {
namespace {

// [abc], [a-z], [!a-z]: returns the length of the class in `p` (0 if `p`
// has no closing ']', so the '[' is literal) and whether `c` is in it.
std::size_t match_class(std::string_view p, char c, bool& matched) {
  std::size_t i = 1;
  bool negate = i < p.size() && (p[i] == '!' || p[i] == '^');
  if (negate) ++i;
  bool in = false;
  for (bool first = true; i < p.size() && (first || p[i] != ']'); first = false) {
    char lo = p[i];
    if (i + 2 < p.size() && p[i + 1] == '-' && p[i + 2] != ']') {
      in = in || (lo <= c && c <= p[i + 2]);
      i += 3;
    } else {
      in = in || lo == c;
      ++i;
    }
  }
  if (i >= p.size()) return 0;
  matched = in != negate;
  return i + 1;
}

bool match(std::string_view p, std::string_view s) {
  while (!p.empty()) {
    if (p.starts_with("**")) {
      auto rest = p.substr(2);
      if (rest.starts_with('/')) {
        // "**/x": x here, or after any number of whole directories.
        if (match(rest.substr(1), s)) return true;
        for (std::size_t i = 0; i < s.size(); ++i)
          if (s[i] == '/' && match(rest.substr(1), s.substr(i + 1))) return true;
        return false;
      }
      for (std::size_t i = 0; i <= s.size(); ++i)
        if (match(rest, s.substr(i))) return true;
      return false;
    }
    char c = p.front();
    if (c == '*') {
      for (std::size_t i = 0; i <= s.size(); ++i) {
        if (match(p.substr(1), s.substr(i))) return true;
        if (i < s.size() && s[i] == '/') break;
      }
      return false;
    }
    if (s.empty()) return false;
    if (c == '?') {
      if (s.front() == '/') return false;
    } else if (c == '[') {
      bool in = false;
      auto len = match_class(p, s.front(), in);
      if (len > 0) {
        if (!in || s.front() == '/') return false;
        p.remove_prefix(len);
        s.remove_prefix(1);
        continue;
      }
      if (s.front() != '[') return false;
    } else {
      if (c == '\\' && p.size() > 1) {
        p.remove_prefix(1);
        c = p.front();
      }
      if (s.front() != c) return false;
    }
    p.remove_prefix(1);
    s.remove_prefix(1);
  }
  return s.empty();
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view path) { return match(pattern, path); }

void IgnoreRules::add_line(std::string_view line, const std::string& base) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  while (!line.empty() && line.back() == ' ' && !(line.size() > 1 && line[line.size() - 2] == '\\'))
    line.remove_suffix(1);
  if (line.empty() || line.front() == '#') return;
  Rule r;
  r.base = base;
  if (line.front() == '!') {
    r.negate = true;
    line.remove_prefix(1);
  } else if (line.starts_with("\\!") || line.starts_with("\\#")) {
    line.remove_prefix(1);
  }
  if (line.ends_with('/')) {
    r.dir_only = true;
    line.remove_suffix(1);
  }
  r.anchored = line.find('/') != std::string_view::npos;
  if (line.starts_with('/')) line.remove_prefix(1);
  if (line.empty()) return;
  r.pattern = std::string(line);
  rules_.push_back(std::move(r));
}

void IgnoreRules::add_file(std::string_view text, const std::string& base) {
  while (!text.empty()) {
    auto nl = text.find('\n');
    add_line(text.substr(0, nl), base);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  }
}

void IgnoreRules::add_pattern(std::string_view pattern) { add_line(pattern, ""); }

bool IgnoreRules::ignored(std::string_view path, bool is_dir) const {
  bool result = false;
  for (const auto& r : rules_) {
    if (r.dir_only && !is_dir) continue;
    std::string_view rel = path;
    if (!r.base.empty()) {
      if (!(rel.starts_with(r.base) && rel.size() > r.base.size() && rel[r.base.size()] == '/')) continue;
      rel.remove_prefix(r.base.size() + 1);
    }
    std::string_view subject = rel;
    if (!r.anchored) {
      auto slash = rel.rfind('/');
      if (slash != std::string_view::npos) subject = rel.substr(slash + 1);
    }
    if (match(r.pattern, subject)) result = !r.negate;
  }
  return result;
}

}  // namespace sgpu::launcher::ssh
