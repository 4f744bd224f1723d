#include "sgpu/launcher/outputs/run_state_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/outputs/run_files.hpp"
#include "sgpu/launcher/outputs/summary.hpp"

namespace sgpu::launcher {

RunStateFile::RunStateFile(const std::string& run_dir, nlohmann::ordered_json record)
    : path_((std::filesystem::path(run_dir) / kRunStateFile).string()), record_(std::move(record)) {
  auto lock_path = (std::filesystem::path(run_dir) / kRunLockFile).string();
  // O_CLOEXEC: ranks must not hold the lock, or a lost supervisor would look alive.
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw Error(fmt::format("cannot create {}: {}", lock_path, std::strerror(errno)), 1);
  // Blocking: a reader holds it for a moment at most, and only once state.json exists.
  while (::flock(lock_fd_, LOCK_EX) != 0)
    if (errno != EINTR) throw Error(fmt::format("cannot lock {}: {}", lock_path, std::strerror(errno)), 1);
  record_["state"] = run_state_name(RunState::Running);
  write_file_atomic(path_, dump_json(record_));
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
  write_file_atomic(path_, dump_json(record_));
}

}  // namespace sgpu::launcher
