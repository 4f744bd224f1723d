#pragma once
// The writer side of run management (runs/registry.hpp reads it): the run's
// lock, flock'd for as long as the supervisor lives (the kernel drops it
// when the process dies, however it dies), and state.json, written
// atomically when the run starts ("running") and when it ends (the final
// state, exit code and end time). A reader that finds "running" and a free
// lock knows the run was lost.
#include <string>

#include <nlohmann/json.hpp>

#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/runs/run_state.hpp"

namespace sgpu::launcher {

class RunStateFile {
 public:
  // Takes <run_dir>/lock, then writes state.json from `record` (run_id,
  // host, sgpu_pid, started_at, world_size, nnodes, entrypoint...) with
  // "state": "running". Throws sgpu::Error naming a file it cannot create.
  RunStateFile(const std::string& run_dir, nlohmann::ordered_json record);
  ~RunStateFile();
  RunStateFile(const RunStateFile&) = delete;
  RunStateFile& operator=(const RunStateFile&) = delete;

  // Records the end; the lock stays held until destruction. Throws sgpu::Error.
  void finish(RunState state, int exit_code, Clock::time_point started, Clock::time_point ended, double duration_s);

  // The lock and state.json again, in a run directory made again after it
  // was deleted while the run was live. Throws sgpu::Error.
  void rewrite();

 private:
  void take_lock();

  std::string path_;
  nlohmann::ordered_json record_;
  int lock_fd_ = -1;
};

}  // namespace sgpu::launcher
