// The job spec's own keys, one row each (spec_schema.hpp); each backend adds
// its table's rows (backends/*/..._keys.cpp). To add a launch option: a
// field in JobSpec, a row here (its flag is registered from the row), and a
// README line.
#include <charconv>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/rank_list.hpp"
#include "sgpu/env/run_name.hpp"
#include "sgpu/env/stop_signal.hpp"
#include "sgpu/launcher/spec/spec_schema.hpp"

namespace sgpu::launcher {
namespace {

using K = ValueKind;
using S = Setting;

int to_int(const S& v) { return static_cast<int>(as_int(v)); }

void set_module(JobSpec& s, const S& v) {
  using Kind = env::Entrypoint::Kind;
  if (as_bool(v))
    s.entrypoint.kind = Kind::Module;
  else if (s.entrypoint.kind == Kind::Module)
    s.entrypoint.kind = Kind::Script;
}

void set_no_python(JobSpec& s, const S& v) {
  using Kind = env::Entrypoint::Kind;
  if (as_bool(v))
    s.entrypoint.kind = Kind::Executable;
  else if (s.entrypoint.kind == Kind::Executable)
    s.entrypoint.kind = Kind::Script;
}

// An empty path would silently mean the default runs directory.
void set_log_dir(JobSpec& s, const S& v) {
  if (as_string(v).empty())
    throw Error(fmt::format("{}: an empty path; give a directory, or leave it out for the default ($SGPU_HOME/runs)",
                            v.subject()));
  s.log_dir = as_string(v);
}

void set_nproc(JobSpec& s, const S& v) {
  if (std::holds_alternative<std::int64_t>(v.value)) {
    s.nproc = to_int(v);
    s.nproc_mode.clear();
  } else {
    s.nproc.reset();
    s.nproc_mode = as_string(v);
  }
}

void set_name(JobSpec& s, const S& v) {
  if (auto problem = env::run_name_problem(as_string(v)); !problem.empty())
    throw Error(fmt::format("{}: {}", v.where(), problem));
  s.name = as_string(v);
}

void set_idempotency_key(JobSpec& s, const S& v) {
  if (auto problem = env::idempotency_key_problem(as_string(v)); !problem.empty())
    throw Error(fmt::format("{}: {}", v.where(), problem));
  s.idempotency_key = as_string(v);
}

// "off" is the word users try first for a sampler; "none" is every other duration's.
void set_sample_every(JobSpec& s, const S& v) {
  auto text = as_string(v);
  env::Duration every(text == "off" ? "none" : text, v.subject());
  if (every.limit() && every.limit()->count() < 0.1)
    throw Error(
        fmt::format("{}: '{}' is shorter than 100ms, which would cost the ranks' node more than it tells; give "
                    "100ms or more (10s is the default), or off",
                    v.where(), text));
  s.sample_every = every;
}

void set_straggler_factor(JobSpec& s, const S& v) {
  const auto& text = as_string(v);
  if (text == "off" || text == "none") {
    s.straggler_factor = 0;
    return;
  }
  double f = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), f);
  if (ec != std::errc() || end != text.data() + text.size() || !(f > 1) || f > 1000)
    throw Error(
        fmt::format("{}: '{}' is not a factor above 1 (e.g. 1.5: a rank at two thirds of the others' "
                    "median step rate; off: no straggler warnings)",
                    v.where(), text));
  s.straggler_factor = f;
}

std::vector<KeyInfo> make_keys() {
  constexpr std::int64_t kMaxRanks = 1 << 20;
  return {
      // [job]
      {.path = "job.entrypoint",
       .help = "script, module or program to run (on the command line: the first word "
               "after the options)",
       .apply = [](JobSpec& s, const S& v) { s.entrypoint.target = as_string(v); }},
      {.path = "job.args",
       .kind = K::StringList,
       .help = "arguments for the entrypoint, passed untouched",
       .apply = [](JobSpec& s, const S& v) { s.entrypoint.args = as_list(v); }},
      {.path = "job.python",
       .flags = "--python",
       .env = "SGPU_PYTHON",
       .help = "Python interpreter (default: $SGPU_PYTHON, else python3 on PATH)",
       .apply = [](JobSpec& s, const S& v) { s.python = as_string(v); }},
      {.path = "job.module",
       .kind = K::Bool,
       .flags = "-m,--module",
       .help = "run the entrypoint as a Python module (python -m)",
       .apply = set_module},
      {.path = "job.no_python",
       .kind = K::Bool,
       .flags = "--no-python,--no_python",
       .help = "run the entrypoint as a program, not with Python",
       .apply = set_no_python},
      {.path = "job.ray",
       .kind = K::Bool,
       .flags = "--ray",
       .help = "start a Ray cluster on the job's nodes (one Ray node each, with its slots or GPUs) and run the "
               "entrypoint once, on node 0, as the Ray driver",
       .apply = [](JobSpec& s, const S& v) { s.ray = as_bool(v); }},
      {.path = "job.ray_dashboard",
       .kind = K::Bool,
       .flags = "--ray-dashboard",
       .help = "with --ray: start Ray's dashboard on the head (off by default)",
       .apply = [](JobSpec& s, const S& v) { s.ray_dashboard = as_bool(v); }},
      {.path = "job.ray_metrics",
       .kind = K::Bool,
       .flags = "--ray-metrics",
       .help = "with --ray: once a second, every Ray node's resources (total, available) into "
               "<run dir>/ray/metrics.jsonl",
       .apply = [](JobSpec& s, const S& v) { s.ray_metrics = as_bool(v); }},
      // [resources]
      {.path = "resources.backend",
       .kind = K::Choice,
       .flags = "--backend",
       .help = "where the ranks run: this node (local), hosts over ssh, a SLURM allocation",
       .choices = {},  // each backend's flag name, added as the registry lists it (add_backend_keys)
       .apply = [](JobSpec& s, const S& v) { s.backend = as_string(v); }},
      {.path = "resources.nodes",
       .kind = K::NodeCount,
       .flags = "--nnodes,--nodes",
       .help = "number of nodes (torchrun's --nnodes)",
       .min = 1,
       .max = 1 << 16,
       .apply = [](JobSpec& s, const S& v) { s.nodes = to_int(v); }},
      {.path = "resources.gpus",
       .kind = K::Int,
       .flags = "--gpus",
       .help = "GPUs for the whole job, one rank per GPU",
       .min = 1,
       .max = kMaxRanks,
       .apply = [](JobSpec& s, const S& v) { s.gpus = to_int(v); }},
      {.path = "resources.gpus_per_node",
       .kind = K::Int,
       .flags = "--gpus-per-node",
       .help = "GPUs (one rank each) on every node",
       .min = 1,
       .max = 1024,
       .apply = [](JobSpec& s, const S& v) { s.gpus_per_node = to_int(v); }},
      {.path = "resources.nproc",
       .kind = K::RankCount,
       .flags = "--nproc,--nproc-per-node,--nproc_per_node",
       .help = "CPU ranks per node (or torchrun's gpu, auto, cpu)",
       .min = 1,
       .max = 4096,
       .choices = {"gpu", "auto", "cpu"},
       .apply = set_nproc},
      {.path = "resources.gpu_type",
       .flags = "--gpu-type",
       .help = "GPU type to require, e.g. H100 (detected when omitted)",
       .apply = [](JobSpec& s, const S& v) { s.gpu_type = as_string(v); }},
      {.path = "resources.include",
       .flags = "--include",
       .help = "only these hosts/GPUs, DeepSpeed style: \"a:0,2@b\"; on one node \":0,2\"",
       .apply = [](JobSpec& s, const S& v) { s.include = as_string(v); }},
      {.path = "resources.exclude",
       .flags = "--exclude",
       .help = "not these hosts/GPUs: \"b:1\"; on one node \":3\"",
       .apply = [](JobSpec& s, const S& v) { s.exclude = as_string(v); }},
      {.path = "resources.spares",
       .kind = K::Int,
       .flags = "--spares",
       .help = "hosts held ready beyond the job's nodes (ssh: the hosts given beyond --nnodes): a node lost during "
               "an attempt is replaced by one for the next attempt (--max-restarts), with the same WORLD_SIZE "
               "(default 0)",
       .min = 0,
       .max = 1 << 16,
       .apply = [](JobSpec& s, const S& v) { s.spares = to_int(v); }},
      {.path = "resources.gpu_bind",
       .kind = K::Choice,
       .flags = "--gpu-bind",
       .help = "how ranks see GPUs: node (all the job's GPUs, LOCAL_RANK picks) or per-rank (only its own)",
       .choices = {"node", "per-rank"},
       .apply = [](JobSpec& s,
                   const S& v) { s.gpu_bind = as_string(v) == "per-rank" ? GpuBind::PerRank : GpuBind::Node; }},
      {.path = "resources.cpu_bind",
       .kind = K::Choice,
       .flags = "--cpu-bind",
       .help = "bind each rank's CPUs and memory: none (default), numa (its GPU's NUMA node; torchrun's node), "
               "socket, core (one core each) or exclusive (its share of its NUMA node's cores)",
       .choices = {"none", "numa", "socket", "core", "exclusive", "node"},
       .apply = [](JobSpec& s, const S& v) { s.cpu_bind = parse_cpu_bind(as_string(v)).value_or(CpuBind::None); }},
      // [env]
      {.path = "env",
       .kind = K::StringMap,
       .help = "variables for every rank: NAME = \"value\"",
       .apply = [](JobSpec& s, const S& v) { s.env[v.key.substr(4)] = as_string(v); }},
      {.path = "job.max_restarts",
       .kind = K::Int,
       .flags = "--max-restarts,--max_restarts",
       .help = "start every rank (on every node) again after a rank fails, up to N times (default 0)",
       .min = 0,
       .max = 1000000,
       .apply = [](JobSpec& s, const S& v) { s.max_restarts = to_int(v); }},
      {.path = "job.health_gate",
       .kind = K::Choice,
       .flags = "--health-gate",
       .help = "on (default): before the first start and every restart, the job's GPUs are read through NVML, and "
               "one with uncorrectable ECC errors, pending retirements or remaps, off the bus or used by another "
               "process is left out for the rest of the run (a spare GPU of this node takes its place); off",
       .choices = {"on", "off"},
       .apply = [](JobSpec& s, const S& v) { s.health_gate = as_string(v) == "on"; }},
      {.path = "job.restart_backoff",
       .kind = K::Duration,
       .flags = "--restart-backoff",
       .help = "wait before the first restart (default 1s), doubled for each one after, at most 60s",
       .none_ok = false,
       .apply = [](JobSpec& s, const S& v) { s.restart_backoff = env::Duration(as_string(v), v.subject()); }},
      // [timeouts]
      {.path = "timeouts.timeout",
       .kind = K::Duration,
       .flags = "--timeout",
       .help = "time limit of the whole run, all restarts included: 3h (default), 90m, 2h30m, 3600, none",
       .apply = [](JobSpec& s, const S& v) { s.timeout = env::Duration(as_string(v), v.subject()); }},
      {.path = "timeouts.grace",
       .kind = K::Duration,
       .flags = "--grace",
       .help = "time between SIGTERM and SIGKILL on teardown (default 30s)",
       .none_ok = false,
       .apply = [](JobSpec& s, const S& v) { s.grace = env::Duration(as_string(v), v.subject()); }},
      {.path = "timeouts.hang_timeout",
       .kind = K::Duration,
       .flags = "--hang-timeout",
       .help = "end the job as hung when no rank made progress (an output line, a heartbeat) for this long, after "
               "printing every rank's stack: 10m, 30s; none (default) never",
       .apply = [](JobSpec& s, const S& v) { s.hang_timeout = env::Duration(as_string(v), v.subject()); }},
      {.path = "timeouts.signal_before",
       .flags = "--signal-before",
       .help = "SIG@D: every rank gets SIG once, D before the run's deadline (--timeout, or the SLURM "
               "allocation's end), to checkpoint, e.g. USR2@5m",
       .apply = [](JobSpec& s, const S& v) { s.signal_before = env::parse_signal_before(as_string(v), v.subject()); }},
      {.path = "timeouts.stop_signal",
       .flags = "--stop-signal",
       .help = "the signal a stopped rank gets first, its process alone; its whole group gets SIGKILL after the "
               "grace (default TERM)",
       .apply = [](JobSpec& s, const S& v) { s.stop_signal = env::parse_signal(as_string(v), v.subject()); }},
      // [monitor]
      {.path = "monitor.sample_every",
       .flags = "--sample-every",
       .help = "how often each node samples its ranks (CPU, memory, step rate) and GPUs (NVML) into metrics.jsonl: "
               "10s (default), 1s, off",
       .apply = set_sample_every},
      {.path = "monitor.straggler_factor",
       .flags = "--straggler-factor",
       .help = "warn once of a rank whose heartbeat step rate is this many times below the other ranks' median in "
               "two samples in a row: 1.5 (default), off",
       .apply = set_straggler_factor},
      {.path = "monitor.metrics_port",
       .kind = K::Int,
       .flags = "--metrics-port",
       .help = "serve the job's samples, state and progress in Prometheus' text format on this port (/metrics)",
       .min = 1,
       .max = 65535,
       .apply = [](JobSpec& s, const S& v) { s.metrics_port = to_int(v); }},
      {.path = "monitor.metrics_addr",
       .flags = "--metrics-addr",
       .help = "the address --metrics-port listens on (default 127.0.0.1; 0.0.0.0: every interface)",
       .apply = [](JobSpec& s, const S& v) { s.metrics_addr = as_string(v); }},
      // [output]
      {.path = "output.format",
       .kind = K::Choice,
       .flags = "-o,--output",
       .help = "text (default), or json: one summary document on stdout, the job's lines on stderr (with --dry-run, "
               "the plan)",
       .choices = {"text", "json"},
       .apply = [](JobSpec& s, const S& v) { s.output_format = as_string(v); }},
      {.path = "output.ranks",
       .flags = "--ranks",
       .help = "ranks shown on the console, e.g. 0,3 or 0-3 (every rank is still logged)",
       .apply = [](JobSpec& s, const S& v) { s.console_ranks = env::parse_rank_list(as_string(v), v.subject()); }},
      {.path = "output.raw",
       .kind = K::Bool,
       .flags = "--raw",
       .help = "show one rank's output untouched, without prefix (rank 0, or the one --ranks names)",
       .apply = [](JobSpec& s, const S& v) { s.raw_output = as_bool(v); }},
      {.path = "output.report_bindings",
       .kind = K::Bool,
       .flags = "--report-bindings",
       .help = "print each rank's CPUs and NUMA node at start (also in events.jsonl and summary.json)",
       .apply = [](JobSpec& s, const S& v) { s.report_bindings = as_bool(v); }},
      {.path = "output.timestamps",
       .kind = K::Bool,
       .flags = "--timestamps",
       .help = "prefix each console line with the time it arrived",
       .apply = [](JobSpec& s, const S& v) { s.timestamps = as_bool(v); }},
      {.path = "output.log_dir",
       .flags = "--log-dir,--log_dir",
       .help = "parent directory of the run directory",
       .apply = set_log_dir},
      {.path = "output.detach",
       .kind = K::Bool,
       .flags = "--detach",
       .help = "run in the background: print the run id and return; sgpu status/logs/wait/cancel RUN follow it",
       .apply = [](JobSpec& s, const S& v) { s.detach = as_bool(v); }},
      {.path = "output.keep_runs",
       .kind = K::Int,
       .flags = "--keep-runs",
       .env = "SGPU_KEEP_RUNS",
       .help = "finished runs kept in the runs directory: each launch removes older ones (default 100; 0 keeps all)",
       .min = 0,
       .max = 1000000000,
       .apply = [](JobSpec& s, const S& v) { s.keep_runs = to_int(v); }},
      {.path = "job.name",
       .flags = "--name",
       .help = "the run's name, shown by sgpu runs and status; sgpu status/logs/wait/cancel NAME find its newest run",
       .apply = set_name},
      {.path = "job.idempotency_key",
       .flags = "--idempotency-key",
       .env = "SGPU_IDEMPOTENCY_KEY",
       .help = "start nothing when a run with this key is running (follow it) or succeeded (reuse it); a CI step's "
               "id makes retries safe",
       .apply = set_idempotency_key},
      // [rendezvous]
      {.path = "rendezvous.master_port",
       .kind = K::Int,
       .flags = "--master-port,--master_port",
       .help = "MASTER_PORT (default: a free port, reserved for the run)",
       .min = 1,
       .max = 65535,
       .apply = [](JobSpec& s, const S& v) { s.master_port = to_int(v); }},
      {.path = "rendezvous.master_addr",
       .flags = "--master-addr,--master_addr",
       .help = "MASTER_ADDR (default: node 0's address)",
       .apply = [](JobSpec& s, const S& v) { s.rendezvous.master_addr = as_string(v); }},
      {.path = "rendezvous.endpoint",
       .flags = "--rdzv-endpoint,--rdzv_endpoint",
       .help = "HOST:PORT of the rendezvous server (static multi-node)",
       .apply = [](JobSpec& s, const S& v) { s.rendezvous.endpoint = as_string(v); }},
      {.path = "rendezvous.node_rank",
       .kind = K::Int,
       .flags = "--node-rank,--node_rank",
       .help = "this node's rank (static multi-node)",
       .min = 0,
       .max = 1 << 16,
       .apply = [](JobSpec& s, const S& v) { s.rendezvous.node_rank = to_int(v); }},
      {.path = "rendezvous.secret_file",
       .flags = "--rdzv-secret-file",
       .help = "file holding the run's shared secret (mode 0600)",
       .apply = [](JobSpec& s, const S& v) { s.rendezvous.secret_file = as_string(v); }},
      {.path = "rendezvous.join_timeout",
       .kind = K::Duration,
       .flags = "--join-timeout",
       .help = "how long to wait for every node (default 10m)",
       .apply = [](JobSpec& s, const S& v) { s.rendezvous.join_timeout = env::Duration(as_string(v), v.subject()); }},
      {.path = "rendezvous.heartbeat_timeout",
       .kind = K::Duration,
       .flags = "--heartbeat-timeout",
       .help = "silence after which a node counts as lost (default 10s)",
       .none_ok = false,
       .apply = [](JobSpec& s,
                   const S& v) { s.rendezvous.heartbeat_timeout = env::Duration(as_string(v), v.subject()); }},
      {.path = "rendezvous.explain_network",
       .kind = K::Bool,
       .flags = "--explain-network",
       .help = "join every node and run the reachability check, then print per node the interface that reaches "
               "MASTER_ADDR and the NCCL/GLOO_SOCKET_IFNAME its ranks would get: no rank starts, the entrypoint "
               "may be left out (exit 0 every node reaches it, 1 one does not)",
       .apply = [](JobSpec& s, const S& v) { s.rendezvous.explain_network = as_bool(v); }},
      // [preflight]
      {.path = "preflight.enabled",
       .kind = K::Bool,
       .flags = "--preflight",
       .help = "check the job's GPUs first (NVML health, an NCCL all-reduce, as sgpu doctor does); a failed check "
               "stops the launch before any rank starts",
       .apply = [](JobSpec& s, const S& v) { s.preflight.enabled = as_bool(v); }},
      {.path = "preflight.only",
       .kind = K::Bool,
       .flags = "--preflight-only",
       .help = "only check the job's GPUs, on every node, and print sgpu doctor's report: no rank starts, the "
               "entrypoint may be left out (exit 0 healthy, 1 a check failed, 3 nothing to check)",
       .apply = [](JobSpec& s, const S& v) { s.preflight.only = as_bool(v); }},
      {.path = "preflight.max_bytes",
       .help = "the preflight's largest all-reduce, where its bus bandwidth is judged (default 1G)",
       .apply = [](JobSpec& s, const S& v) { s.preflight.max_bytes = as_string(v); }},
      {.path = "preflight.iters",
       .kind = K::Int,
       .help = "timed all-reduces per size in the preflight (default 20)",
       .min = 1,
       .max = 100000,
       .apply = [](JobSpec& s, const S& v) { s.preflight.iters = to_int(v); }},
      {.path = "preflight.timeout",
       .kind = K::Duration,
       .help = "limit of the whole preflight, so a hung all-reduce costs no more (default 3m)",
       .none_ok = false,
       .apply = [](JobSpec& s, const S& v) { s.preflight.timeout = env::Duration(as_string(v), v.subject()); }},
      {.path = "preflight.expect_busbw",
       .help = "expected bus bandwidth in GB/s at the largest size, instead of the GPU type's",
       .apply = [](JobSpec& s, const S& v) { s.preflight.expect_busbw = as_string(v); }},
      // [mlflow]
      {.path = "mlflow.uri",
       .flags = "--mlflow",
       .env = "MLFLOW_TRACKING_URI",
       .help = "MLflow tracking server (http(s)://host:port): the launch becomes a run there, the ranks log into it",
       .apply = [](JobSpec& s, const S& v) { s.mlflow.uri = as_string(v); }},
      {.path = "mlflow.experiment",
       .flags = "--mlflow-experiment",
       .env = "MLFLOW_EXPERIMENT_NAME",
       .help = "MLflow experiment name, created when missing (default: the server's default experiment)",
       .apply = [](JobSpec& s, const S& v) { s.mlflow.experiment = as_string(v); }},
      {.path = "mlflow.experiment_id",
       .flags = "--mlflow-experiment-id",
       .env = "MLFLOW_EXPERIMENT_ID",
       .help = "MLflow experiment id, when no experiment name is given",
       .apply = [](JobSpec& s, const S& v) { s.mlflow.experiment_id = as_string(v); }},
      {.path = "mlflow.run_name",
       .flags = "--mlflow-run-name",
       .help = "MLflow run name (default: the sgpu run id)",
       .apply = [](JobSpec& s, const S& v) { s.mlflow.run_name = as_string(v); }},
      {.path = "mlflow.enabled",
       .kind = K::Bool,
       .flags = "--no-mlflow",
       .help = "track the launch in MLflow when a server is named (--no-mlflow: never)",
       .flag_value = "false",
       .apply = [](JobSpec& s, const S& v) { s.mlflow.enabled = as_bool(v); }},
      {.path = "mlflow.timeout",
       .kind = K::Duration,
       .flags = "--mlflow-timeout",
       .help = "how long the tracking server may take when the run is created and when it is closed (default 5s)",
       .none_ok = false,
       .apply = [](JobSpec& s, const S& v) { s.mlflow.timeout = env::Duration(as_string(v), v.subject()); }},
  };
}

}  // namespace

std::vector<KeyInfo> core_spec_keys() { return make_keys(); }

}  // namespace sgpu::launcher
