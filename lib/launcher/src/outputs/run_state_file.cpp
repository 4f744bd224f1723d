#include "sgpu/launcher/outputs/run_state_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/run_files.hpp"
#include "sgpu/launcher/outputs/summary.hpp"

namespace sgpu::launcher {

RunStateFile::RunStateFile(const std::string& run_dir, nlohmann::ordered_json record)
    : path_((std::filesystem::path(run_dir) / kRunStateFile).string()), record_(std::move(record)) {
  take_lock();
  record_["state"] = run_state_name(RunState::Running);
  write_run_file(path_, dump_json(record_));
}

void RunStateFile::take_lock() {
  auto lock_path = (std::filesystem::path(path_).parent_path() / kRunLockFile).string();
  // O_CLOEXEC: ranks must not hold the lock, or a lost supervisor would look alive.
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(fmt::format("cannot create {}: {}", lock_path, std::strerror(errno)), 1);
  // Blocking: a reader holds it for a moment at most, and only once state.json exists.
  while (::flock(fd, LOCK_EX) != 0)
    if (errno != EINTR) {
      int error = errno;
      ::close(fd);
      throw Error(fmt::format("cannot lock {}: {}", lock_path, std::strerror(error)), 1);
    }
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = fd;
}

void RunStateFile::rewrite() {
  take_lock();
  write_run_file(path_, dump_json(record_));
}

RunStateFile::~RunStateFile() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void RunStateFile::finish(RunState state, int exit_code, Clock::time_point started, Clock::time_point ended,
                          double duration_s) {
  record_["state"] = run_state_name(state);
  record_["started_at"] = iso_time(started);
  record_["exit_code"] = exit_code;
  record_["ended_at"] = iso_time(ended);
  record_["duration_s"] = duration_s;
  auto text = dump_json(record_);
  try {
    write_run_file(path_, text);
  } catch (const Error&) {
    // Once more: a full disk may have room again (the summary's failed copy
    // was just removed). Readers fall back on events.jsonl and summary.json.
    write_run_file(path_, text);
  }
}

}  // namespace sgpu::launcher
