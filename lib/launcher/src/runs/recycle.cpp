#include "sgpu/launcher/runs/recycle.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "sgpu/launcher/io/fd.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/runs/retire.hpp"
#include "sgpu/launcher/runs/run_state.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

namespace {
constexpr const char* kClaimPrefix = ".new-";

struct Entry {
  std::string name;
  bool dir = false;
};

// The entries of the directory `fd` (just opened; left open), read
// before any of them changes: a rename while readdir walks may show a name
// twice. getdents64 itself: readdir's DIR would cost a dup, an fstat and a
// close more for each of a run's directories.
bool entries_of(int fd, std::vector<Entry>& out) {
  alignas(8) char buffer[8192];
  while (true) {
    auto n = ::syscall(SYS_getdents64, fd, buffer, sizeof buffer);
    if (n < 0) return false;
    if (n == 0) return true;
    for (long at = 0; at < n;) {
      dirent64 e{};
      std::memcpy(&e, buffer + at, offsetof(dirent64, d_name));
      const char* name_at = buffer + at + offsetof(dirent64, d_name);
      at += e.d_reclen;
      std::string_view name(name_at);
      if (name == "." || name == "..") continue;
      bool is_dir = e.d_type == DT_DIR;
      if (e.d_type == DT_UNKNOWN) {
        struct stat st {};
        is_dir = ::fstatat(fd, name_at, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
      }
      out.push_back({std::string(name), is_dir});
    }
  }
}

// What the claimed directory's reset moves out of it: each entry into the
// trash itself, as .old-<run id>-<n> (a directory for them all would be one
// more inode made and freed a launch), for the trash's deleter to free.
// Freeing a file's written-out blocks is what costs on this path (ext4
// mounted with discard waits for the device, ~75 us a file here), and a
// retired run's logs may hold gigabytes.
class Junk {
 public:
  Junk(int trash, const std::string& run_id) : trash_(trash), prefix_(kOldPrefix + run_id + "-") {}
  // Moves `name` under `dir` (a file or a whole directory) into the trash.
  bool take(int dir, const std::string& name) {
    auto to = prefix_ + std::to_string(taken_++);
    return ::renameat(dir, name.c_str(), trash_, to.c_str()) == 0 || errno == ENOENT;
  }

 private:
  int trash_;
  std::string prefix_;
  int taken_ = 0;
};

// Whether the regular file `name` under `dir` holds nothing.
bool is_empty_file(int dir, const std::string& name) {
  struct stat st {};
  return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_size == 0;
}

bool is_log(std::string_view name) { return name == "stdout" || name == "stderr"; }

// A rank's directory: its empty logs stay (those of the ranks that wrote
// nothing are one inode's names, as the new run's empty logs are: its log
// written to gets a file of its own first), everything else goes.
bool reset_rank_dir(int parent, const std::string& name, Junk& junk) {
  Fd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  std::vector<Entry> entries;
  if (!fd.ok() || !entries_of(fd.get(), entries)) return false;
  for (const auto& e : entries) {
    bool keep = !e.dir && is_log(e.name) && is_empty_file(fd.get(), e.name);
    if (!keep && !junk.take(fd.get(), e.name)) return false;
  }
  return true;
}

// "17" -> 17 (a rank's directory, a spare's slot); anything but a plain
// decimal number -> nullopt.
std::optional<int> decimal_of(std::string_view name) {
  int r = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), r);
  if (ec != std::errc() || end != name.data() + name.size() || name.empty() || r < 0) return std::nullopt;
  if (name.size() > 1 && name.front() == '0') return std::nullopt;  // "07" is no rank's name
  return r;
}

bool reset_ranks(int run, int ranks, int first_rank, Junk& junk) {
  if (ranks <= 0) return true;
  if (::mkdirat(run, "ranks", 0777) != 0 && errno != EEXIST) return false;
  Fd fd(::openat(run, "ranks", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  std::vector<Entry> entries;
  if (!fd.ok() || !entries_of(fd.get(), entries)) return false;
  std::vector<bool> present(static_cast<std::size_t>(ranks), false);
  for (const auto& e : entries) {
    auto r = decimal_of(e.name);
    bool ours = e.dir && r && *r >= first_rank && *r - first_rank < ranks;
    if (ours) {
      if (!reset_rank_dir(fd.get(), e.name, junk)) return false;
      present[static_cast<std::size_t>(*r - first_rank)] = true;
    } else if (!junk.take(fd.get(), e.name)) {
      return false;
    }
  }
  for (int i = 0; i < ranks; ++i)
    if (!present[static_cast<std::size_t>(i)] && ::mkdirat(fd.get(), std::to_string(first_rank + i).c_str(), 0777) != 0)
      return false;
  return true;
}

// Whether `name` under `dir` may be kept as a spare (io/run_files.hpp): a
// file the old run wrote whole (its state, spec, summary) or a spare already,
// small, and no other file's name too.
bool may_be_spare(int dir, const std::string& name) {
  if (name != kRunStateFile && name != "spec.json" && name != "summary.json" && !name.starts_with(kSparePrefix))
    return false;
  struct stat st {};
  return ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 &&
         st.st_size <= kMaxSpareBytes;
}

// ".spare-2" -> 2, for the names a spare keeps; else nullopt.
std::optional<int> spare_slot(std::string_view name) {
  if (!name.starts_with(kSparePrefix)) return std::nullopt;
  auto k = decimal_of(name.substr(std::string_view(kSparePrefix).size()));
  return k && *k < kMaxSpares ? k : std::nullopt;
}

// The claimed directory made into a new run's: what holds no data stays
// (the directories, the empty lock and logs), the files the old run wrote
// whole stay as spares for the new run's to overwrite, the rest goes to the
// junk.
bool reset_run(int run, int ranks, int first_rank, Junk& junk) {
  std::vector<Entry> entries;
  if (!entries_of(run, entries)) return false;
  std::vector<bool> slot_taken(kMaxSpares, false);
  std::vector<std::string> spares;  // to be renamed to a free slot
  for (const auto& e : entries) {
    bool keep = e.dir ? e.name == "ranks" && ranks > 0 : e.name == kRunLockFile && is_empty_file(run, e.name);
    if (keep) continue;
    if (!e.dir && may_be_spare(run, e.name)) {
      auto k = spare_slot(e.name);
      if (k && !slot_taken[static_cast<std::size_t>(*k)]) {
        slot_taken[static_cast<std::size_t>(*k)] = true;
      } else {
        spares.push_back(e.name);
      }
      continue;
    }
    if (!junk.take(run, e.name)) return false;
  }
  for (const auto& name : spares) {
    auto free = std::find(slot_taken.begin(), slot_taken.end(), false);
    bool placed = free != slot_taken.end() &&
                  ::renameat2(run, name.c_str(), run, spare_name(static_cast<int>(free - slot_taken.begin())).c_str(),
                              RENAME_NOREPLACE) == 0;
    if (placed)
      *free = true;
    else if (!junk.take(run, name))
      return false;
  }
  // The lock's mtime says when the run started (retire.cpp orders a second's
  // runs by it where the directory's birth time is an older run's).
  if (::utimensat(run, kRunLockFile, nullptr, AT_SYMLINK_NOFOLLOW) != 0 && errno != ENOENT) return false;
  // Private: a run keeps its ranks' logs and environment, which may hold secrets.
  return reset_ranks(run, ranks, first_rank, junk) && ::fchmod(run, 0700) == 0;
}
}  // namespace

std::optional<std::string> recycle_retired_run(const std::string& root, const std::string& run_id, int ranks,
                                               int first_rank) {
  auto trash_path = root + "/" + kRunsTrashDir;
  Fd trash(::open(trash_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!trash.ok()) return std::nullopt;
  // Shared with other launches (each claim is one rename: one wins), never
  // with the deleter, which takes it exclusively; closing the trash drops it.
  if (::flock(trash.get(), LOCK_SH | LOCK_NB) != 0) return std::nullopt;
  std::vector<Entry> entries;
  if (!entries_of(trash.get(), entries)) return std::nullopt;
  auto claim = kClaimPrefix + run_id;
  for (const auto& e : entries) {
    if (!e.dir || e.name.starts_with('.')) continue;
    if (::renameat(trash.get(), e.name.c_str(), trash.get(), claim.c_str()) != 0) continue;  // another took it
    Fd run(::openat(trash.get(), claim.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    Junk junk(trash.get(), run_id);
    if (!run.ok() || !reset_run(run.get(), ranks, first_rank, junk)) return std::nullopt;
    auto dir = fs::absolute(fs::path(root) / run_id).string();
    // Never over a directory another node of this run on this host made meanwhile: it is the run's already.
    if (::renameat2(trash.get(), claim.c_str(), AT_FDCWD, dir.c_str(), RENAME_NOREPLACE) != 0) return std::nullopt;
    return dir;
  }
  return std::nullopt;
}

std::string make_run_dir(const std::string& root, const std::string& run_id, int ranks, int first_rank) {
  if (auto dir = recycle_retired_run(root, run_id, ranks, first_rank)) return *dir;
  return create_run_dir(root, run_id, ranks, first_rank);
}

}  // namespace sgpu::launcher
