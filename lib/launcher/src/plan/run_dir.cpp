#include "sgpu/launcher/plan/run_dir.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

std::string run_id_second(std::time_t unix_seconds) {
  std::tm tm{};
  ::gmtime_r(&unix_seconds, &tm);
  return fmt::format("{:04d}{:02d}{:02d}-{:02d}{:02d}{:02d}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
}

std::string make_run_id() {
  unsigned char bytes[3] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != sizeof bytes) bytes[0] = static_cast<unsigned char>(::clock());
  return fmt::format("{}-{:02x}{:02x}{:02x}", run_id_second(std::time(nullptr)), bytes[0], bytes[1], bytes[2]);
}

std::string default_runs_root(const env::Environment& environment) {
  auto get = [&](const char* name) -> std::string {
    auto it = environment.find(name);
    return it == environment.end() ? std::string() : it->second;
  };
  // A shell leaves "~" in a quoted assignment (SGPU_HOME="~/sgpu"), and so
  // do env files and container settings: it is meant as the home all the same.
  if (auto home = get("SGPU_HOME"); !home.empty())
    return (fs::path(expand_home(home, environment, "SGPU_HOME")) / "runs").string();
  if (auto state = get("XDG_STATE_HOME"); !state.empty()) return (fs::path(state) / "sgpu" / "runs").string();
  if (auto home = get("HOME"); !home.empty()) return (fs::path(home) / ".local/state/sgpu/runs").string();
  return (private_temp_dir(environment) / "runs").string();
}

fs::path private_temp_dir(const env::Environment& environment) {
  auto tmp = environment.find("TMPDIR");
  fs::path base = tmp == environment.end() || tmp->second.empty() ? fs::path("/tmp") : fs::path(tmp->second);
  auto dir = base / fmt::format("sgpu-{}", ::geteuid());
  // Another user could have made it first, to read or replace our runs.
  ::mkdir(dir.c_str(), 0700);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)
    throw Error(fmt::format("HOME is not set, and {} (where runs would go instead) is not a private directory of "
                            "yours; set HOME or SGPU_HOME, or give --log-dir",
                            dir.string()),
                1);
  return dir;
}

std::optional<std::string> passwd_home(const std::string& user) {
  long hint = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buffer(hint > 0 ? static_cast<std::size_t>(hint) : 16384);
  while (true) {
    passwd entry{};
    passwd* found = nullptr;
    int err = ::getpwnam_r(user.c_str(), &entry, buffer.data(), buffer.size(), &found);
    if (err == ERANGE && buffer.size() < (1u << 20)) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    if (err != 0 || found == nullptr || found->pw_dir == nullptr) return std::nullopt;
    return std::string(found->pw_dir);
  }
}

std::string expand_home(const std::string& path, const env::Environment& environment, std::string_view what,
                        HomeOf home_of) {
  if (!path.starts_with('~')) return path;
  auto slash = path.find('/');
  auto user = path.substr(1, slash == std::string::npos ? std::string::npos : slash - 1);
  auto rest = slash == std::string::npos ? std::string() : path.substr(slash);
  if (!user.empty()) {
    auto home = home_of(user);
    if (!home)
      throw Error(
          fmt::format("{} {}: there is no user '{}' on this host, so '~{}' means nothing; give an absolute "
                      "path",
                      what, path, user, user));
    return *home + rest;
  }
  auto home = environment.find("HOME");
  if (home == environment.end() || home->second.empty())
    throw Error(fmt::format("{} {}: HOME is not set, so '~' means nothing; give an absolute path", what, path));
  return home->second + rest;
}

std::string runs_root(const std::string& log_dir, const env::Environment& environment) {
  return log_dir.empty() ? default_runs_root(environment) : expand_home(log_dir, environment, "--log-dir");
}

std::string create_run_dir(const std::string& root, const std::string& run_id, int ranks, int first_rank) {
  auto dir = fs::absolute(fs::path(root) / run_id);
  std::error_code ec;
  fs::create_directories(dir, ec);
  // Private: a run keeps its ranks' logs and environment, which may hold secrets.
  if (!ec) fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  if (ec) throw Error(fmt::format("cannot create the run directory {}: {}", dir.string(), ec.message()), 1);
  // One mkdir a rank, relative to ranks/ (create_directories stats every
  // component of every path first: three calls a rank, for 1000 ranks).
  auto ranks_dir = dir / "ranks";
  if (ranks > 0 && ::mkdir(ranks_dir.c_str(), 0777) != 0 && errno != EEXIST)
    throw Error(fmt::format("cannot create {}: {}", ranks_dir.string(), std::strerror(errno)), 1);
  int at = ranks > 0 ? ::open(ranks_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (ranks > 0 && at < 0) throw Error(fmt::format("cannot open {}: {}", ranks_dir.string(), std::strerror(errno)), 1);
  for (int r = first_rank; r < first_rank + ranks; ++r) {
    if (::mkdirat(at, std::to_string(r).c_str(), 0777) == 0 || errno == EEXIST) continue;
    int e = errno;
    ::close(at);
    throw Error(fmt::format("cannot create {}/{}: {}", ranks_dir.string(), r, std::strerror(e)), 1);
  }
  if (at >= 0) ::close(at);
  return dir.string();
}

}  // namespace sgpu::launcher
