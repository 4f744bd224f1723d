#include "sgpu/launcher/runs/retire.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>

#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/runs/registry.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

namespace {
// ioprio_set(2): best effort at its lowest level, for the whole process. Not
// the idle class, nor nice 19: on a machine kept busy those starve it for
// minutes, and the disk waits for its space meanwhile.
constexpr int kIoprioWhoProcess = 1;
constexpr int kIoprioClassBestEffort = 2;
constexpr int kIoprioLowestLevel = 7;
constexpr int kIoprioClassShift = 13;
constexpr int kBackgroundNice = 10;

// Run ids start with the year; other names under the runs directory are
// no run's, and neither count nor go.
bool looks_like_run(const std::string& name) { return !name.empty() && name[0] >= '0' && name[0] <= '9'; }

bool has_state(const std::string& dir) {
  struct stat st {};
  return ::stat((dir + "/" + kRunStateFile).c_str(), &st) == 0;
}

// Ids have a resolution of one second: when the newest `keep` end inside a
// second, that second's runs (a few) are put in order by their recorded
// start, as `sgpu runs` lists them.

// A statx time as a time point, when it is of the id's second or later
// (nullopt when not given, or older: a directory recycled from an older run
// was born with that run).
std::optional<std::chrono::system_clock::time_point> time_of_id(const std::string& id, bool given,
                                                                const statx_timestamp& t) {
  if (!given || id.compare(0, kRunIdSecond, run_id_second(static_cast<std::time_t>(t.tv_sec))) > 0) return std::nullopt;
  return std::chrono::system_clock::time_point{std::chrono::duration_cast<std::chrono::system_clock::duration>(
      std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec))};
}

// When a run started: its lock's mtime, the time the lock was made or (a
// directory recycled from a retired run: runs/recycle.hpp) taken, as the run
// starts, and never changed after (one statx; a launch every few
// milliseconds has a hundred runs in one second to order, and reading each
// state.json cost more than the rest of retention). A directory recycled
// from a run of the same second is no younger by its birth time, which was
// the first measure. Without a lock of the id's second or later, the
// directory's birth time, then state.json's started_at.
std::chrono::system_clock::time_point started_at(const std::string& root, const std::string& id) {
  struct statx st {};
  auto dir = root + "/" + id;
  auto lock = dir + "/" + kRunLockFile;
  if (::statx(AT_FDCWD, lock.c_str(), AT_STATX_DONT_SYNC, STATX_MTIME, &st) == 0)
    if (auto taken = time_of_id(id, (st.stx_mask & STATX_MTIME) != 0, st.stx_mtime)) return *taken;
  if (::statx(AT_FDCWD, dir.c_str(), AT_STATX_DONT_SYNC, STATX_BTIME, &st) == 0)
    if (auto born = time_of_id(id, (st.stx_mask & STATX_BTIME) != 0, st.stx_btime)) return *born;
  auto run = read_run(root, id);
  return run && run->started ? *run->started : std::chrono::system_clock::time_point{};
}

void order_boundary_second(const std::string& root, std::vector<std::string>& ids, std::size_t kept) {
  if (kept == 0 || kept >= ids.size() || !same_second(ids[kept - 1], ids[kept])) return;
  auto lo = kept - 1;
  while (lo > 0 && same_second(ids[lo - 1], ids[kept])) --lo;
  auto hi = kept + 1;
  while (hi < ids.size() && same_second(ids[hi], ids[kept])) ++hi;
  std::vector<std::pair<std::chrono::system_clock::time_point, std::string>> second;
  for (auto i = lo; i < hi; ++i) second.emplace_back(started_at(root, ids[i]), ids[i]);
  std::stable_sort(second.begin(), second.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto i = lo; i < hi; ++i) ids[i] = std::move(second[i - lo].second);
}

std::string trash_of(const std::string& root) { return root + "/" + kRunsTrashDir; }

// One rename; a name already in the trash (a run retired twice by two
// launches at once cannot be, but a copy can) gets this process's id.
bool move_to_trash(const std::string& dir, const std::string& to, std::string& error) {
  if (::rename(dir.c_str(), to.c_str()) == 0) return true;
  if ((errno == EEXIST || errno == ENOTEMPTY) &&
      ::rename(dir.c_str(), fmt::format("{}.{}", to, ::getpid()).c_str()) == 0)
    return true;
  if (errno == ENOENT) return false;  // another launch retired it first
  error = fmt::format("{}: cannot move it into {}: {}", dir, fs::path(to).parent_path().string(), std::strerror(errno));
  return false;
}
}  // namespace

RetireOutcome retire_runs(const std::string& root, int keep, std::size_t limit) {
  RetireOutcome out;
  auto ids = run_ids(root);
  if (keep < 0 || ids.size() <= static_cast<std::size_t>(keep)) return out;  // one listing decides
  auto dir_of = [&](std::size_t i) { return root + "/" + ids[i]; };
  auto is_run = [&](std::size_t i) { return looks_like_run(ids[i]); };
  auto kept = kept_span(ids.size(), keep, is_run);
  order_boundary_second(root, ids, kept);
  kept = kept_span(ids.size(), keep, is_run);
  auto trash = trash_of(root);
  bool trash_made = false;
  for (std::size_t i = ids.size(); i > kept; --i) {  // oldest first
    auto dir = dir_of(i - 1);
    // A run without state.json is starting (or no run); one whose lock is held is running.
    if (!is_run(i - 1) || !has_state(dir) || run_lock_held(dir)) continue;
    if (out.retired >= limit) {
      out.more = true;
      break;
    }
    if (!trash_made && ::mkdir(trash.c_str(), 0700) != 0 && errno != EEXIST) {
      out.errors.push_back(fmt::format("cannot create {}: {}", trash, std::strerror(errno)));
      break;
    }
    trash_made = true;
    std::string error;
    if (move_to_trash(dir, trash + "/" + ids[i - 1], error))
      ++out.retired;
    else if (!error.empty())
      out.errors.push_back(std::move(error));
  }
  return out;
}

std::size_t trash_size(const std::string& root) {
  std::size_t n = 0;
  DIR* dir = ::opendir(trash_of(root).c_str());
  if (dir == nullptr) return 0;
  while (auto* entry = ::readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name == "." || name == ".." || (name.starts_with(kOldPrefix) && !name.ends_with("-0"))) continue;
    ++n;
  }
  ::closedir(dir);
  return n;
}

std::vector<std::string> empty_trash(const std::string& root, int keep, bool spare_newest) {
  auto errors = retire_runs(root, keep, static_cast<std::size_t>(-1)).errors;  // races are harmless: one rename wins
  auto trash = trash_of(root);
  int fd = ::open(trash.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) errors.push_back(fmt::format("cannot open {}: {}", trash, std::strerror(errno)));
    return errors;
  }
  // One deleter at a time; the one at work takes what others retire meanwhile, or the next one does.
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
    std::error_code ec;
    std::vector<fs::path> entries{fs::directory_iterator(trash, ec), fs::directory_iterator()};
    // The newest retired run stays for the next launch to take (recycle.hpp):
    // deleted, that launch would make its directory afresh.
    std::string spared;
    if (spare_newest)
      for (const auto& e : entries) {
        auto name = e.filename().string();
        if (looks_like_run(name) && name > spared && fs::is_directory(fs::symlink_status(e, ec))) spared = name;
      }
    for (const auto& e : entries) {
      if (e.filename() == spared) continue;
      std::error_code removing;
      fs::remove_all(e, removing);
      if (removing) errors.push_back(fmt::format("{}: {}", e.string(), removing.message()));
    }
  }
  ::close(fd);
  return errors;
}

void empty_trash_detached(const std::string& root, int keep) {
  pid_t pid = ::fork();
  if (pid != 0) return;  // the caller goes on; a failed fork leaves the trash to the next launch
  // Its own process group, in sgpu's session: Ctrl-C on the terminal is for
  // the job, and sgpu's end-of-run sweep spares what it started itself.
  ::setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  int null = ::open("/dev/null", O_RDWR);
  for (int std_fd = 0; std_fd < 3; ++std_fd) ::dup2(null, std_fd);
  ::close_range(3, ~0U, 0);  // the run's lock above all: a lost supervisor must look lost
  ::setpriority(PRIO_PROCESS, 0, kBackgroundNice);
  ::syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, (kIoprioClassBestEffort << kIoprioClassShift) | kIoprioLowestLevel);
  try {
    empty_trash(root, keep, true);
  } catch (...) {  // nothing to report to: the next launch tries again
  }
  ::_exit(0);
}

}  // namespace sgpu::launcher
