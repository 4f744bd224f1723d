#include "backends/ssh/sync.hpp"

#include <sys/wait.h>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>

#include "backends/ssh/ignore_rules.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/launcher/process/child_process.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void walk(const fs::path& root, const std::string& rel, ssh::IgnoreRules& rules, std::vector<std::string>& out) {
  auto here = rel.empty() ? root : root / rel;
  if (fs::exists(fs::symlink_status(here / ".gitignore"))) rules.add_file(read_text(here / ".gitignore"), rel);
  std::vector<fs::directory_entry> entries{fs::directory_iterator(here), fs::directory_iterator()};
  std::sort(entries.begin(), entries.end());
  for (const auto& e : entries) {
    auto name = e.path().filename().string();
    auto path = rel.empty() ? name : rel + "/" + name;
    bool is_dir = e.is_directory() && !e.is_symlink();
    if (name == ".git" || rules.ignored(path, is_dir)) continue;
    if (is_dir)
      walk(root, path, rules, out);
    else if (e.is_regular_file() || e.is_symlink())
      out.push_back(path);
  }
}

}  // namespace

std::vector<std::string> sync_file_list(const std::string& dir, const std::vector<std::string>& excludes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error(fmt::format("--sync {}: not a directory", dir));
  ssh::IgnoreRules rules;
  for (const auto& p : excludes) rules.add_pattern(p);
  std::vector<std::string> out;
  try {
    walk(fs::path(dir), "", rules, out);
  } catch (const fs::filesystem_error& e) {
    throw Error(fmt::format("--sync {}: cannot read {}: {}", dir, e.path1().string(), e.code().message()));
  }
  return out;
}

void make_sync_tarball(const std::string& dir, const std::vector<std::string>& files, const std::string& out) {
  auto list = out + ".files";
  {
    std::ofstream f(list, std::ios::binary);
    for (const auto& p : files) f << p << '\0';
    if (!f) throw Error(fmt::format("--sync: cannot write {}", list), 1);
  }
  auto tar = find_on_path("tar");
  if (tar.empty()) throw Error("--sync needs tar on the PATH", 1);
  auto err_file = out + ".err";
  ChildOptions options;
  options.argv = {"tar", "-C", dir, "--null", "--no-recursion", "-T", list, "-czf", out};
  options.program = tar;
  options.err = ChildStream::path(err_file);
  boost::asio::io_context io;  // the pidfd's; tar runs to its end here, off any loop
  int status = 0;
  try {
    status = ChildProcess(io, options).wait();
  } catch (const std::system_error& e) {
    throw Error(fmt::format("--sync: cannot start {}", e.what()), 1);
  }
  int code = env::ExitStatus::from_wait_status(status).shell_code();
  auto err = read_text(err_file);
  fs::remove(list);
  fs::remove(err_file);
  if (code != 0) throw Error(fmt::format("--sync {}: tar failed (exit {}): {}", dir, code, err), 1);
}

}  // namespace sgpu::launcher
