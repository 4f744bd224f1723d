#pragma once
// Which files `--sync DIR` leaves out: the rules of .gitignore files (in DIR
// and below, each for its own subtree) and --sync-exclude patterns, with
// git's meaning: `#` comments, `!` re-includes, a trailing `/` matches only
// directories, a `/` at the start or inside anchors the pattern to the
// file's directory (else it matches a name at any depth), `*` and `?` stop at
// `/`, `**` crosses directories, `[a-z]` classes. The last matching rule
// wins. Pure: the caller walks the directory and reads the files.
#include <string>
#include <string_view>
#include <vector>

namespace sgpu::launcher::ssh {

// Glob match of one pattern against a '/'-separated path, as above.
bool glob_match(std::string_view pattern, std::string_view path);

class IgnoreRules {
 public:
  // The lines of a .gitignore found in `base` ("" for the root, "src/sub").
  void add_file(std::string_view text, const std::string& base);
  // One --sync-exclude pattern, read like a line of the root .gitignore.
  void add_pattern(std::string_view pattern);
  // `path` is relative to the root, without a trailing '/'.
  bool ignored(std::string_view path, bool is_dir) const;

 private:
  struct Rule {
    std::string pattern;  // without '!', the trailing '/' and a leading '/'
    std::string base;     // the directory of its .gitignore, "" for the root
    bool negate = false;
    bool dir_only = false;
    bool anchored = false;
  };
  void add_line(std::string_view line, const std::string& base);
  std::vector<Rule> rules_;
};

}  // namespace sgpu::launcher::ssh
