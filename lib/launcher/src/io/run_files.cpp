#include "sgpu/launcher/io/run_files.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"

namespace sgpu::launcher {
namespace fs = std::filesystem;

// Joined as fs::path's / joins them, without its parse of every component:
// a launch makes these paths a few times a rank.
std::string rank_dir(const std::string& run_dir, int rank) {
  std::string dir;
  dir.reserve(run_dir.size() + 20);
  dir += run_dir;
  if (!dir.empty() && dir.back() != '/') dir += '/';
  fmt::format_to(std::back_inserter(dir), "ranks/{}", rank);
  return dir;
}

std::string rank_log_path(const std::string& run_dir, int rank, Stream stream) {
  return rank_dir(run_dir, rank) + (stream == Stream::Out ? "/stdout" : "/stderr");
}

std::string iso_time(Clock::time_point t) {
  auto secs = Clock::to_time_t(t);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  return fmt::format("{:04d}-{:02d}-{:02d}T{:02d}:{:02d}:{:02d}.{:03d}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

AppendFile::AppendFile(const std::string& path, bool keep) : path_(path) {
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (keep ? 0 : O_TRUNC);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) throw Error(fmt::format("cannot create {}: {}", path, std::strerror(errno)), 1);
}

AppendFile AppendFile::deferred(const std::string& path) {
  AppendFile f;
  f.path_ = path;
  f.deferred_ = true;
  return f;
}

AppendFile AppendFile::adopt(int fd, std::string name) {
  AppendFile f;
  f.fd_ = fd;
  f.path_ = std::move(name);
  return f;
}

bool AppendFile::open_deferred(bool for_append) {
  deferred_ = false;
  // The rank's directory (and ranks/) when missing, never the run directory
  // above them: one deleted while its run is live is not made again behind
  // the user's back, with another mode (create_run_dir makes it 0700).
  // The directories are made only when the open says they are missing: a
  // launcher of 4096 remote ranks made 16384 mkdirs, three in four failing.
  constexpr int kFlags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_TRUNC;
  if (std::exchange(linked_, false)) ::unlink(path_.c_str());  // the others linked to the same inode stay empty
  fd_ = ::open(path_.c_str(), kFlags, 0644);
  if (fd_ < 0 && errno == ENOENT) {
    auto rank_dir = fs::path(path_).parent_path();
    if (::mkdir(rank_dir.c_str(), 0700) != 0 && errno == ENOENT) {
      ::mkdir(rank_dir.parent_path().c_str(), 0700);
      ::mkdir(rank_dir.c_str(), 0700);
    }
    fd_ = ::open(path_.c_str(), kFlags, 0644);
  }
  // A name that shares its inode with other ranks' logs (the empty logs of
  // a run directory recycled from a retired run: runs/recycle.hpp) gets a
  // file of its own before any byte goes in.
  struct stat st {};
  if (fd_ >= 0 && for_append && ::fstat(fd_, &st) == 0 && st.st_nlink > 1) {
    ::close(fd_);
    ::unlink(path_.c_str());
    fd_ = ::open(path_.c_str(), kFlags, 0644);
  }
  if (fd_ < 0) error_ = fmt::format("cannot create it: {}", std::strerror(errno));
  return fd_ >= 0;
}

void AppendFile::create() {
  if (deferred_ && !linked_) open_deferred(false);
}

bool AppendFile::create_as_link_to(const std::string& empty) {
  if (!deferred_ || linked_) return true;
  // A name there already is a recycled run's log, emptied as the run directory was taken.
  if (::link(empty.c_str(), path_.c_str()) != 0 && errno != EEXIST) return false;
  linked_ = true;  // still deferred: an append opens a file of its own
  return true;
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      deferred_(std::exchange(other.deferred_, false)),
      linked_(std::exchange(other.linked_, false)),
      path_(std::move(other.path_)),
      error_(std::move(other.error_)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    deferred_ = std::exchange(other.deferred_, false);
    linked_ = std::exchange(other.linked_, false);
    path_ = std::move(other.path_);
    error_ = std::move(other.error_);
  }
  return *this;
}

bool AppendFile::append(std::string_view bytes) {
  if (deferred_ && !open_deferred(true)) return false;
  if (fd_ < 0 || !error_.empty()) return false;
  while (!bytes.empty()) {
    ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = std::strerror(errno);
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

namespace {

// Puts the written `tmp` in the place of `path`. True when `path` held a
// regular file, which is at `tmp` now; throws (`tmp` removed) when it cannot.
bool put_in_place(const std::string& tmp, const std::string& path) {
  // Over an existing file, an exchange: a rename over it made ext4
  // (auto_da_alloc) start writing the new file's blocks out at once, 40 us
  // more than this each time state.json is rewritten. A reader sees the old
  // or the new file, never neither, as with the rename. Only with a regular
  // file: a directory or a link there stays a rename's failure or
  // replacement, as before.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0)
    return true;
  std::error_code ec;
  fs::rename(tmp, path, ec);  // no file there yet (ENOENT), or a filesystem without exchange (EINVAL)
  if (!ec) return false;
  ::unlink(tmp.c_str());  // of no use to anyone, as in write_tmp
  throw Error(fmt::format("cannot write {}: {}", path, ec.message()), 1);
}

// `content` as the whole of the file `tmp`. One taken over from an earlier
// write (`reused`: a spare) is overwritten from its start and cut to length,
// never emptied first (that would free its block); any other is made empty
// first. Throws sgpu::Error naming it; a half-written `tmp` is gone then (of
// no use to anyone, and on a full disk its blocks are what the next, smaller
// file, state.json, needs).
void write_tmp(const std::string& tmp, std::string_view content, bool reused) {
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (reused ? 0 : O_TRUNC), 0644);
  if (fd < 0) {
    int err = errno;
    if (reused) ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot create {}: {}", tmp, std::strerror(err)), 1);
  }
  int err = 0;
  for (std::size_t at = 0; at < content.size() && err == 0;) {
    ssize_t n = ::pwrite(fd, content.data() + at, content.size() - at, static_cast<off_t>(at));
    if (n >= 0)
      at += static_cast<std::size_t>(n);
    else if (errno != EINTR)
      err = errno;
  }
  if (err == 0 && reused && ::ftruncate(fd, static_cast<off_t>(content.size())) != 0) err = errno;
  ::close(fd);
  if (err != 0) {
    ::unlink(tmp.c_str());
    throw Error(fmt::format("cannot write {}: {}", tmp, std::strerror(err)), 1);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view content) {
  auto tmp = path + ".tmp";
  write_tmp(tmp, content, false);
  if (put_in_place(tmp, path)) ::unlink(tmp.c_str());
}

std::string spare_name(int slot) { return kSparePrefix + std::to_string(slot); }

void write_run_file(const std::string& path, std::string_view content) {
  auto tmp = path + ".tmp";
  auto dir = fs::path(path).parent_path();
  bool spare = false;
  for (int k = 0; k < kMaxSpares && !spare; ++k) spare = ::rename((dir / spare_name(k)).c_str(), tmp.c_str()) == 0;
  write_tmp(tmp, content, spare);
  if (!put_in_place(tmp, path)) return;
  for (int k = 0; k < kMaxSpares; ++k)  // the file replaced: a spare now, for the next write
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, (dir / spare_name(k)).c_str(), RENAME_NOREPLACE) == 0) return;
  ::unlink(tmp.c_str());
}

namespace {

// Writes all of `content` to `fd`, opened non-blocking: a FIFO's reader gets
// 5 s to take each part, never more. The error's text, "" when all went.
std::string write_all(int fd, std::string_view content) {
  constexpr int kWriteThroughWaitMs = 5000;
  while (!content.empty()) {
    ssize_t n = ::write(fd, content.data(), content.size());
    if (n >= 0) {
      content.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return std::strerror(errno);
    pollfd p{fd, POLLOUT, 0};
    int ready = ::poll(&p, 1, kWriteThroughWaitMs);
    if (ready == 0) return fmt::format("its reader took nothing for {} s", kWriteThroughWaitMs / 1000);
    if (ready < 0 && errno != EINTR) return std::strerror(errno);
  }
  return {};
}

}  // namespace

void write_named_file(const std::string& path, std::string_view content) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 ? errno == ENOENT : S_ISREG(st.st_mode)) {
    write_file_atomic(path, content);
    return;
  }
  // A FIFO without a reader fails at once (ENXIO) rather than wait for one.
  int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
  if (fd < 0) {
    const char* why = errno == ENXIO ? "it is a FIFO that nobody reads" : std::strerror(errno);
    throw Error(fmt::format("cannot write {}: {}", path, why), 1);
  }
  auto error = write_all(fd, content);
  ::close(fd);
  if (!error.empty()) throw Error(fmt::format("cannot write {}: {}", path, error), 1);
}

std::optional<std::string> read_file(const std::string& path, std::size_t max_bytes, bool tail, std::string* problem) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer that never comes.
  // O_NOFOLLOW: what a rank left in its run directory is read, not whatever
  // a symlink there points to.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
  if (fd < 0) {
    if (errno != ENOENT && problem != nullptr)
      *problem = errno == ELOOP ? "it is a symbolic link" : fmt::format("cannot read it: {}", std::strerror(errno));
    return std::nullopt;
  }
  struct stat st {};
  std::optional<std::string> out;
  bool stat_ok = ::fstat(fd, &st) == 0;
  if (stat_ok && !S_ISREG(st.st_mode)) {
    if (problem != nullptr) *problem = S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file";
  } else if (stat_ok) {
    auto size = static_cast<std::size_t>(st.st_size);
    off_t start = tail && size > max_bytes ? static_cast<off_t>(size - max_bytes) : 0;
    std::string data(std::min(size, max_bytes), '\0');
    std::size_t got = 0;
    while (got < data.size()) {
      ssize_t n = ::pread(fd, data.data() + got, data.size() - got, start + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    data.resize(got);
    out = std::move(data);
  }
  ::close(fd);
  return out;
}

}  // namespace sgpu::launcher
