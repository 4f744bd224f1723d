#pragma once
// An allocation sgpu asks SLURM for and holds while the job runs (`--backend
// slurm` outside an allocation).
//
// salloc runs `sh -c 'read code; exit $code'` as its command, reading from a
// pipe sgpu holds: the allocation lasts until sgpu writes the job's exit code
// (the job ends COMPLETED or FAILED, with that code, as it would have under
// salloc), or until sgpu dies, however it dies (end of file: the job ends,
// nothing is left allocated). salloc is not tied to sgpu's life for the same
// reason. If SLURM revokes the allocation (scancel, its time limit), salloc's
// --kill-command ends the command and salloc exits, saying why on stderr.
//
// sgpu listens to salloc until the grant, and again from release() to its
// exit (the end of its stderr). In between it leaves salloc be: the job's
// own step reports what SLURM does to the job, and the event loop's other
// work (the run) ends without waiting for the allocation to.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "backends/slurm/slurm_job.hpp"
#include "sgpu/env/rank_env.hpp"

namespace sgpu::launcher {

// Why salloc ended.
struct SallocEnd {
  enum class Kind {
    Released,   // sgpu released it
    Refused,    // never granted: salloc's errors say why
    Cancelled,  // pending or granted, then cancelled (scancel, or sgpu's cancel())
    TimeLimit,  // SLURM's time limit revoked it
    Revoked,    // revoked for another reason
  };
  Kind kind = Kind::Released;
  int wait_status = 0;
  std::vector<std::string> errors;  // salloc's "error:" lines
  std::string last_line;            // what salloc said last
};

class SallocHold {
 public:
  struct Events {
    std::function<void(const std::string& job_id)> pending;
    std::function<void(const std::string& job_id)> granted;
    std::function<void(const SallocEnd&)> ended;
    std::function<void(const std::string& line)> line;  // every line salloc writes, for the run's log
  };

  // Starts salloc with `argv` (slurm::salloc_argv), its command reading the
  // hold pipe. Throws sgpu::Error if salloc cannot be started.
  SallocHold(boost::asio::io_context& io, std::vector<std::string> argv, const env::Environment& environment,
             const std::string& cwd, Events events);
  ~SallocHold();  // releases (exit code 1) if release() was not called
  SallocHold(const SallocHold&) = delete;
  SallocHold& operator=(const SallocHold&) = delete;

  const std::string& job_id() const;  // "" until salloc names it
  bool granted() const;
  bool ended() const;

  // Before the grant: salloc withdraws the request (SIGINT, as Ctrl-C would).
  void cancel();
  // The job is over: the allocation ends with this exit code; ended()
  // follows once salloc has exited.
  void release(int exit_code);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgpu::launcher
