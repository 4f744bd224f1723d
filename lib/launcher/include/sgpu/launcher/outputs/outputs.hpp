#pragma once
// Everything a run shows and keeps, composed from observers: the run
// directory's logs and event stream, the console and the status line while
// the job runs; at the end the report on stderr, summary.json, the results,
// sgpu's own error file and, with `-o json`, the summary on stdout.
// `sgpu launch` makes one, hands observer() to the Supervisor and calls
// finish() with the outcome.
#include <memory>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/outputs/report.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

// Throws sgpu::Error for console options that do not fit the job (--ranks
// beyond the world size, --raw with several ranks, an unknown -o format).
void check_output_options(const JobSpec& spec, int world_size);

class JobOutputs {
 public:
  // Writes spec.json, opens the logs and events.jsonl (the run directory
  // exists); `sgpu_env` is sgpu's own environment (NO_COLOR, TERM,
  // TORCHELASTIC_ERROR_FILE). Throws sgpu::Error when a file cannot be created.
  JobOutputs(boost::asio::io_context& io, const JobSpec& spec, const LaunchPlan& plan,
             const env::Environment& sgpu_env);
  ~JobOutputs();
  JobOutputs(const JobOutputs&) = delete;
  JobOutputs& operator=(const JobOutputs&) = delete;

  JobObserver& observer();
  // One more observer of the job, after the logs and the console (it must
  // outlive this object's use by the job).
  void add_observer(JobObserver& other);
  // The job is over (every rank reaped, no restart to come): what it holds
  // open for the running job (--metrics-port's server) closes, so nothing
  // keeps the loop running.
  void job_over();
  // The MLflow run the launch is tracked as: in the report and the summary.
  // `env`, the variables it gives every rank, joins spec.json's when the run
  // came after the outputs were made (on one node it is awaited beside them).
  void set_tracking(TrackingLink link, const env::Environment& env);
  // Reports the outcome everywhere it goes; returns sgpu's exit code.
  int finish(const JobOutcome& outcome);
  // The run ended before any rank started (the engine reports why): its
  // state.json and events.jsonl record the end, so `sgpu runs` shows it
  // ended (cancelled for a signal, timed-out for --timeout) rather than lost.
  void not_started(int exit_code);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgpu::launcher
