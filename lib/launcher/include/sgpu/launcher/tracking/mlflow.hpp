#pragma once
// Every launch as an MLflow run (README "Experiment tracking"). The launcher
// creates the run before the ranks start (begin: sent as soon as the run
// directory exists; await_run: answered before the first rank), hands every rank
// MLFLOW_TRACKING_URI, MLFLOW_RUN_ID and MLFLOW_EXPERIMENT_ID, and closes it
// when the job has ended (end): metrics, artifacts, status. All run on the
// launcher's Asio loop with a deadline (mlflow.timeout): a server that is
// down, slow or silent gets a one-line warning and the job goes on untracked;
// it never changes the job's exit code.
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/command.hpp"
#include "sgpu/env/exit_code.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/process/events.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/spec/spec.hpp"

namespace sgpu::launcher {

// Where and how to track, from the spec's [mlflow] keys and sgpu's own
// environment (MLflow's variables, read as MLflow's client reads them).
struct MlflowConfig {
  std::string uri;  // as given: the ranks get it unchanged
  std::string experiment_name;
  std::string experiment_id;
  std::string run_name;       // --mlflow-run-name, else --name; "" means the sgpu run id
  std::string parent_run_id;  // MLFLOW_RUN_ID of sgpu's environment: the new run is its child
  std::string token;          // MLFLOW_TRACKING_TOKEN (bearer)
  std::string username;       // MLFLOW_TRACKING_USERNAME / _PASSWORD (basic)
  std::string password;
  bool insecure_tls = false;  // MLFLOW_TRACKING_INSECURE_TLS
  std::string ca_file;        // MLFLOW_TRACKING_SERVER_CERT_PATH
  std::chrono::milliseconds timeout{5000};
};

// nullopt when tracking is off: no uri, or mlflow.enabled false. A uri that
// is not http(s) is an error (sgpu::Error) when the spec, a flag or --set
// gave it; from MLFLOW_TRACKING_URI (a file store, "databricks") it is a
// warning added to `warnings`, and tracking is off.
std::optional<MlflowConfig> mlflow_config(const JobSpec& spec, const env::Environment& sgpu_env,
                                          std::vector<std::string>& warnings);

// What the run's params and tags say about the job.
struct RunDescription {
  std::string sgpu_run_id;
  std::string host;
  std::string user;
  std::string cwd;
  env::Entrypoint entrypoint;
  std::string backend;
  int world_size = 0;
  int nnodes = 1;
  int nproc_per_node = 0;
  int gpus = 0;
  std::string gpu_type;
  std::string timeout;  // "3h", "none"
  env::Environment spec_env;
};
RunDescription describe_run(const JobSpec& spec, const LaunchPlan& plan, const env::Environment& sgpu_env);

// The run the ranks log into.
struct TrackedRun {
  std::string run_id;
  std::string experiment_id;
  std::string url;       // the run's page in the MLflow UI
  env::Environment env;  // MLFLOW_TRACKING_URI, MLFLOW_RUN_ID, MLFLOW_EXPERIMENT_ID for every rank
};

// How the job ended, for the run's metrics, artifacts and status.
struct RunEnd {
  env::JobEnd::Kind end = env::JobEnd::Kind::Completed;
  int exit_code = 0;
  Clock::time_point started{};
  Clock::time_point ended{};
  std::vector<RankRecord> ranks;
  // Files to upload: (path on disk, path in the run's artifacts). Missing and empty files are skipped.
  std::vector<std::pair<std::string, std::string>> artifacts;
  // Artifacts left out when the job succeeded before its params went out
  // (under a second): summary.json holds what they say (the spec, each
  // rank's start, end and exit), and each upload costs the server a request.
  std::vector<std::string> detail_artifacts;
  std::vector<Exclusion> excluded;  // --health-gate: the GPUs left out, tagged sgpu.excluded
};
// summary.json, events.jsonl, spec.json, the root cause's error file and the
// logs of rank 0 and of the root cause's rank; spec.json and events.jsonl
// are details (detail_artifacts).
RunEnd describe_end(const JobOutcome& outcome, const LaunchPlan& plan);
// A run whose ranks never started (the rendezvous failed, a host was
// unreachable): FAILED with sgpu's exit code, nothing to upload.
RunEnd describe_not_started(int exit_code);

class MlflowTracker {
 public:
  MlflowTracker(boost::asio::io_context& io, MlflowConfig config);
  ~MlflowTracker();
  MlflowTracker(const MlflowTracker&) = delete;
  MlflowTracker& operator=(const MlflowTracker&) = delete;

  // Sends the run's creation (its experiment's too, when named and missing)
  // with its tags, and returns: the server works on it while the launch
  // makes ready. await_run() waits for the answer.
  void begin(const RunDescription& job);

  // Runs `io` until the run begin() asked for exists, at most
  // config.timeout after begin(). The params go out once the ranks have run
  // 1 s, or with end()'s metrics. Prints the run's link on stderr, or a
  // warning and returns nullopt (also when begin() was not called).
  // `give_up`: the wait ends early, silently, once it says so (a signal or
  // the run's deadline came first); the run then is not tracked.
  std::optional<TrackedRun> await_run(const std::function<bool()>& give_up = {});

  // Every rank has exited, or the job tears down: the params, when not sent
  // yet, wait for end() (with the metrics, in one call), and nothing of the
  // tracker's holds the loop until then.
  void ranks_ended();

  // --sample-every: a node's sample as MLflow system metrics (MLflow's own
  // names for GPUs; the node in the name with `several_nodes`), sent beside
  // the job, one call in flight at a time. Does nothing without a run.
  void log_sample(const NodeSample& sample, bool several_nodes);

  // Uploads, beside the job, a file that is final before the ranks start
  // (spec.json), with the params once the ranks have run 1 s: end() waits
  // for it and does not send it again. Does nothing when begin() did not
  // create a run.
  void upload_now(const std::string& path, const std::string& name);

  // Logs sgpu's metrics, uploads the artifacts and sets the status with the
  // end time, all at once; runs `io` until done, at most config.timeout.
  // Does nothing when begin() did not create a run.
  void end(const RunEnd& run);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sgpu::launcher
