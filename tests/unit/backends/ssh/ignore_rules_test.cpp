#include <doctest/doctest.h>

#include "backends/ssh/ignore_rules.hpp"

using namespace sgpu::launcher::ssh;

TEST_CASE("ssh::glob_match") {
  struct Row {
    const char* pattern;
    const char* path;
    bool match;
  };
  const Row rows[] = {
      {"*.log", "a.log", true},
      {"*.log", "a.txt", false},
      {"*.log", "d/a.log", false},
      {"a?c", "abc", true},
      {"a?c", "a/c", false},
      {"[a-c]x", "bx", true},
      {"[a-c]x", "dx", false},
      {"[!a-c]x", "dx", true},
      {"[]]", "]", true},
      {"[abc", "[abc", true},
      {"**/build", "build", true},
      {"**/build", "a/b/build", true},
      {"src/**", "src/a/b.py", true},
      {"src/**", "src", false},
      {"a/**/b", "a/b", true},
      {"a/**/b", "a/x/y/b", true},
      {"a/**/b", "a/xb", false},
      {"a/*/b", "a/x/b", true},
      {"a/*/b", "a/x/y/b", false},
      {"\\*star", "*star", true},
      {"\\*star", "xstar", false},
      {"*", "", true},
      {"", "", true},
      {"data*", "data-2024/x", false},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.pattern) + " ~ " + row.path);
    CHECK(glob_match(row.pattern, row.path) == row.match);
  }
}

TEST_CASE("ssh::IgnoreRules follows git's meaning") {
  IgnoreRules rules;
  rules.add_file(
      "# build outputs\n"
      "build/\n"
      "*.log\n"
      "!keep.log\n"
      "/top.txt\n"
      "docs/*.pdf\n"
      "\\#hash\n"
      "trailing   \n"
      "\n",
      "");
  rules.add_file("*.tmp\n/local.cfg\n", "sub");
  rules.add_pattern("data/");
  rules.add_pattern("*.ckpt");
  struct Row {
    const char* path;
    bool is_dir;
    bool ignored;
  };
  const Row rows[] = {
      {"build", true, true},      // a directory rule
      {"build", false, false},    // ... not a file of that name
      {"sub/build", true, true},  // no slash inside: any depth
      {"a.log", false, true},         {"sub/deep/b.log", false, true},
      {"keep.log", false, false},  // re-included
      {"top.txt", false, true},    // anchored to the root
      {"sub/top.txt", false, false},  {"docs/a.pdf", false, true},
      {"x/docs/a.pdf", false, false},  // a slash inside anchors too
      {"#hash", false, true},         {"trailing", false, true},
      {"sub/x.tmp", false, true},  // sub/.gitignore: its subtree only
      {"x.tmp", false, false},        {"sub/local.cfg", false, true},
      {"local.cfg", false, false},    {"sub/a/local.cfg", false, false},
      {"data", true, true},  // --sync-exclude
      {"model.ckpt", false, true},    {"src/train.py", false, false},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.path));
    CHECK(rules.ignored(row.path, row.is_dir) == row.ignored);
  }
}
