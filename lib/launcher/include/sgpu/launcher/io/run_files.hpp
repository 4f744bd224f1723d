#pragma once
// The files of a run directory beyond its layout (run_dir.hpp): where each
// rank's logs live, an append-only file descriptor, whole-file writes that a
// reader never sees half done, and bounded reads.
//   <run-dir>/spec.json  events.jsonl  summary.json
//   <run-dir>/ranks/<rank>/{stdout,stderr,error.json,result}
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "sgpu/launcher/process/events.hpp"

namespace sgpu::launcher {

std::string rank_dir(const std::string& run_dir, int rank);
std::string rank_log_path(const std::string& run_dir, int rank, Stream stream);

// "2026-12-02T11:53:01.042Z" (UTC, milliseconds).
std::string iso_time(Clock::time_point t);

// A file opened for appending, closed on destruction. Each append is one
// write(2) per call (looping only on short writes), straight to the kernel:
// nothing sits in a user-space buffer if sgpu is killed.
class AppendFile {
 public:
  AppendFile() = default;
  // Creates (or truncates, unless `keep`) the file; throws sgpu::Error naming it.
  explicit AppendFile(const std::string& path, bool keep = false);
  // Created (with its directory and the one above it, never more: the run
  // directory is not made again) on the first append or create(), never
  // before: a launcher of thousands of remote ranks must not stall its event
  // loop creating files for them all at once. Failures go to error().
  static AppendFile deferred(const std::string& path);
  // Takes `fd` (open for writing) as its own, closing it when done; `name`
  // stands for the path in messages.
  static AppendFile adopt(int fd, std::string name);
  // Creates a deferred file that nothing was appended to (an empty log).
  void create();
  // The same as a hard link to `empty`, an empty file made by create():
  // a directory entry, no inode of its own (making inodes is most of what
  // a short run costs the filesystem). An append after it replaces the link
  // with a file of its own. A file already there (a recycled run's, emptied)
  // stands for the link. False when it cannot (the caller creates then).
  bool create_as_link_to(const std::string& empty);
  bool is_deferred() const { return deferred_; }
  ~AppendFile();
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // False (with errno's text in error()) when the bytes could not all be
  // written, e.g. a full disk; later appends are then skipped.
  bool append(std::string_view bytes);
  const std::string& error() const { return error_; }
  const std::string& path() const { return path_; }

 private:
  bool open_deferred(bool for_append);

  int fd_ = -1;
  bool deferred_ = false;
  bool linked_ = false;  // path_ is a link to another empty file: never written through
  std::string path_;
  std::string error_;
};

// Writes `content` to a temporary file next to `path` and renames it over
// `path`. Throws sgpu::Error naming the path; the temporary file is gone then.
void write_file_atomic(const std::string& path, std::string_view content);

// A run directory's spare inodes: files whose contents mean nothing, under
// hidden names (.spare-0 .. .spare-3), kept for its whole-file writes to
// take. A run directory taken from a retired run (runs/recycle.hpp) gets the
// old run's state, spec and summary as spares, and each write of the new
// run's overwrites one: no inode made for it, none freed. Making and freeing
// inodes is what a launch costs the file system most (on ext4 without a
// journal each new inode is searched for past every one freed lately).
inline constexpr const char* kSparePrefix = ".spare-";
inline constexpr int kMaxSpares = 4;
// Larger files are not kept: overwriting them would free their tail's blocks
// on the launch's path.
inline constexpr long kMaxSpareBytes = 64 << 10;
// ".spare-2" for slot 2, 0 <= slot < kMaxSpares.
std::string spare_name(int slot);

// write_file_atomic() for a file of a run directory (state.json, spec.json,
// summary.json): the temporary file is a spare of the directory where it has
// one, overwritten from its start and cut to length (never emptied first:
// that would free its block), and the file it replaces is kept as a spare.
// A reader sees the old or the new file whole, as with write_file_atomic().
void write_run_file(const std::string& path, std::string_view content);

// Writes `content` to a file a user named (TORCHELASTIC_ERROR_FILE): a missing
// or regular file is replaced as write_file_atomic() does; anything else (a
// symlink, a FIFO, a device) is opened and written through, as torch does,
// never replaced. A FIFO that nobody reads, or whose reader stops taking
// bytes for 5 s, is an error, not a wait. Throws sgpu::Error naming the path.
void write_named_file(const std::string& path, std::string_view content);

// The file's contents, at most `max_bytes` from its end when `tail`, else its
// first `max_bytes`; nullopt when it does not exist or cannot be read. Only a
// regular file is read (a FIFO or a device could block or never end), and
// never through a symlink: for anything else, or a file that exists but
// cannot be opened, `problem` (when given) says why.
std::optional<std::string> read_file(const std::string& path, std::size_t max_bytes, bool tail = false,
                                     std::string* problem = nullptr);

}  // namespace sgpu::launcher
