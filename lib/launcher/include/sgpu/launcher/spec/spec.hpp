#pragma once
// A job as the user asked for it (a TOML spec, SGPU_* variables, flags and
// --set merged by spec_merge.hpp), before anything is resolved against a node.
// Every field has a key in the schema table (spec_schema.cpp); a new launch
// option is a field here, a row there, and a README line.
#include <any>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/env/command.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/env/stop_signal.hpp"

namespace sgpu::launcher {

enum class GpuBind { Node, PerRank };

// --cpu-bind: what each rank is bound to before exec (plan/binding.hpp).
enum class CpuBind { None, Numa, Socket, Core, Exclusive };

// "none", "numa", "socket", "core", "exclusive", and torchrun's
// --numa-binding name "node" (numa). nullopt for anything else.
std::optional<CpuBind> parse_cpu_bind(std::string_view text);
std::string_view cpu_bind_name(CpuBind mode);

// Each backend's own settings ([ssh], [slurm], ...), kept in the spec by
// table without the core knowing their types. A backend's struct names its
// table (`static constexpr std::string_view kTable = "ssh"`); its schema rows
// write it (`spec.backend_settings.edit<ssh::Settings>()`) and the backend
// reads it (`get<ssh::Settings>()`: the defaults when none was given).
class BackendSettings {
 public:
  template <class T>
  T& edit() {
    auto& slot = tables_[std::string(T::kTable)];
    if (!slot.has_value()) slot = T{};
    return std::any_cast<T&>(slot);
  }
  template <class T>
  const T& get() const {
    static const T defaults{};
    auto it = tables_.find(T::kTable);
    return it == tables_.end() ? defaults : std::any_cast<const T&>(it->second);
  }

 private:
  std::map<std::string, std::any, std::less<>> tables_;
};

// [rendezvous]: master_port works today; the rest is for many nodes (issue 5).
struct RendezvousSpec {
  std::string master_addr;  // "" means node 0's address (127.0.0.1 on one node)
  std::string endpoint;     // HOST:PORT of the rendezvous server (static mode)
  std::optional<int> node_rank;
  std::string secret_file;
  env::Duration join_timeout = "10m";
  env::Duration heartbeat_timeout = "10s";
  bool explain_network = false;  // --explain-network: the rendezvous and its check, printed; no rank
};

// [mlflow]: every launch is an MLflow run when a tracking server is named.
struct MlflowSpec {
  std::string uri;            // "" means untracked
  std::string experiment;     // a name; created when missing
  std::string experiment_id;  // used when no name is given
  std::string run_name;       // "" means the sgpu run id
  bool enabled = true;        // --no-mlflow
  env::Duration timeout = "5s";
};

// [preflight]: the GPU check before the ranks start (`sgpu launch --preflight`,
// the same checks as `sgpu doctor` on exactly the job's GPUs).
struct PreflightSpec {
  bool enabled = false;
  bool only = false;             // --preflight-only: the check and its report, no rank (implies enabled)
  std::string max_bytes = "1G";  // the largest all-reduce, where the bus bandwidth is judged
  int iters = 20;                // timed all-reduces per size
  env::Duration timeout = "3m";  // the whole check, setup included
  std::string expect_busbw;      // GB/s; "" means the GPU type's expectation
};

struct JobSpec {
  env::Entrypoint entrypoint;
  std::string python;        // "" means $SGPU_PYTHON, else python3 on PATH
  std::optional<int> gpus;   // one rank per GPU, for the whole job
  std::optional<int> nproc;  // CPU ranks per node
  std::string nproc_mode;    // torchrun's "gpu", "auto", "cpu", resolved against the node
  std::optional<int> gpus_per_node;
  int nodes = 1;
  std::string backend = "local";  // "local", "ssh", "slurm"
  std::string gpu_type;           // "" means detect
  // --include/--exclude, DeepSpeed's syntax (backends/host_filter.hpp): which
  // hosts and GPUs the job may use; every backend applies them.
  std::string include;
  std::string exclude;
  int spares = 0;  // --spares: hosts held ready to replace a lost node (ssh)
  GpuBind gpu_bind = GpuBind::Node;
  CpuBind cpu_bind = CpuBind::None;
  bool report_bindings = false;    // --report-bindings: one line per rank at start
  std::optional<int> master_port;  // nullopt: a reserved free port
  bool ray = false;                // --ray: one Ray node per sgpu node, the entrypoint is the Ray driver
  bool ray_dashboard = false;      // --ray-dashboard: the head starts Ray's dashboard
  bool ray_metrics = false;        // --ray-metrics: every node's Ray resources into <run dir>/ray/metrics.jsonl
  env::Duration timeout = "3h";
  env::Duration grace = "30s";
  env::Duration hang_timeout = "none";  // --hang-timeout: no progress from any rank for this long ends the job
  // --signal-before SIG@D: every rank gets SIG once, D before the run's
  // deadline (the timeout's, or a SLURM allocation's end). Parsed where set.
  std::optional<env::SignalBefore> signal_before;
  int stop_signal = 15;                  // --stop-signal: what a stopped rank gets first (SIGTERM)
  int max_restarts = 0;                  // restarts of the whole group after a rank fails
  bool health_gate = true;               // the job's GPUs read through NVML before each attempt (health.hpp)
  env::Duration restart_backoff = "1s";  // before the first restart, doubled each time, at most 60s
  std::string log_dir;                   // "" means $SGPU_HOME/runs
  env::Environment env;                  // variables for every rank
  BackendSettings backend_settings;      // [ssh], [slurm]: each backend's, typed by it
  RendezvousSpec rendezvous;
  MlflowSpec mlflow;
  PreflightSpec preflight;
  // [monitor] (README "Seeing a running job").
  env::Duration sample_every = "10s";  // --sample-every: each node samples its ranks and GPUs; none: never
  double straggler_factor = 1.5;       // a rank this much slower than the others' median is a straggler; 0: off
  std::optional<int> metrics_port;     // --metrics-port: Prometheus' /metrics on the launcher
  std::string metrics_addr = "127.0.0.1";

  // How each key that was set got its value, for messages: key ->
  // "--gpus 4", "job.toml:4:8: resources.gpus = 4", "--set resources.gpus=4".
  std::map<std::string, std::string, std::less<>> origins;
  // What the run shows (README "Output"); every rank is logged whatever these say.
  std::vector<int> console_ranks;      // ranks shown on the console; empty: all
  bool raw_output = false;             // one rank's bytes untouched, no prefix
  bool timestamps = false;             // time of arrival on each console line
  std::string output_format = "text";  // "json": one summary document on stdout
  // Run management (README "Managing runs").
  bool detach = false;          // the run goes on in the background; the caller prints its id
  int keep_runs = 100;          // finished runs kept in the runs directory at each launch; 0: all
  std::string name;             // --name: what the user calls the run ("" none); RUN may be a name
  std::string idempotency_key;  // --idempotency-key: a run with this key answers for this launch
};

// origins[key], else `fallback` ("--gpus 4"): the start of an error message
// about that setting.
std::string where_set(const JobSpec& spec, std::string_view key, const std::string& fallback);

}  // namespace sgpu::launcher
