// The job spec's keys, one row each (spec_schema.hpp). To add a launch
// option: a field in JobSpec, a row here (its flag is registered from the
// row), and a README line.
#include "sgpu/launcher/outputs/console.hpp"
#include "sgpu/launcher/spec/spec_schema.hpp"

namespace sgpu::launcher {
namespace {

using K = ValueKind;
using S = Setting;

int to_int(const S& v) { return static_cast<int>(as_int(v)); }

// "--hosts a:8,b:8" and hosts = ["a:8", "b:8"] alike: a host name never holds a comma.
std::vector<std::string> split_commas(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const auto& item : items) {
    std::size_t start = 0;
    while (start <= item.size()) {
      auto comma = std::min(item.find(',', start), item.size());
      if (comma > start) out.push_back(item.substr(start, comma - start));
      start = comma + 1;
    }
  }
  return out;
}

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

void set_nproc(JobSpec& s, const S& v) {
  if (std::holds_alternative<std::int64_t>(v.value)) {
    s.nproc = to_int(v);
    s.nproc_mode.clear();
  } else {
    s.nproc.reset();
    s.nproc_mode = as_string(v);
  }
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
      // [resources]
      {.path = "resources.backend",
       .kind = K::Choice,
       .flags = "--backend",
       .help = "where the ranks run: this node (local), hosts over ssh, a SLURM allocation",
       .choices = {"local", "ssh", "slurm"},
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
      {.path = "resources.gpu_bind",
       .kind = K::Choice,
       .flags = "--gpu-bind",
       .help = "how ranks see GPUs: node (all the job's GPUs, LOCAL_RANK picks) or per-rank (only its own)",
       .choices = {"node", "per-rank"},
       .apply = [](JobSpec& s,
                   const S& v) { s.gpu_bind = as_string(v) == "per-rank" ? GpuBind::PerRank : GpuBind::Node; }},
      // [env]
      {.path = "env",
       .kind = K::StringMap,
       .help = "variables for every rank: NAME = \"value\"",
       .apply = [](JobSpec& s, const S& v) { s.env[v.key.substr(4)] = as_string(v); }},
      // [timeouts]
      {.path = "timeouts.timeout",
       .kind = K::Duration,
       .flags = "--timeout",
       .help = "job time limit: 3h (default), 90m, 2h30m, 3600, none",
       .apply = [](JobSpec& s, const S& v) { s.timeout = as_string(v); }},
      {.path = "timeouts.grace",
       .kind = K::Duration,
       .flags = "--grace",
       .help = "time between SIGTERM and SIGKILL on teardown (default 30s)",
       .none_ok = false,
       .apply = [](JobSpec& s, const S& v) { s.grace = as_string(v); }},
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
       .apply = [](JobSpec& s, const S& v) { s.console_ranks = parse_rank_list(as_string(v), v.subject()); }},
      {.path = "output.raw",
       .kind = K::Bool,
       .flags = "--raw",
       .help = "show one rank's output untouched, without prefix (rank 0, or the one --ranks names)",
       .apply = [](JobSpec& s, const S& v) { s.raw_output = as_bool(v); }},
      {.path = "output.timestamps",
       .kind = K::Bool,
       .flags = "--timestamps",
       .help = "prefix each console line with the time it arrived",
       .apply = [](JobSpec& s, const S& v) { s.timestamps = as_bool(v); }},
      {.path = "output.log_dir",
       .flags = "--log-dir,--log_dir",
       .help = "parent directory of the run directory",
       .apply = [](JobSpec& s, const S& v) { s.log_dir = as_string(v); }},
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
       .apply = [](JobSpec& s, const S& v) { s.rendezvous.join_timeout = as_string(v); }},
      {.path = "rendezvous.heartbeat_timeout",
       .kind = K::Duration,
       .flags = "--heartbeat-timeout",
       .help = "silence after which a node counts as lost (default 10s)",
       .none_ok = false,
       .apply = [](JobSpec& s, const S& v) { s.rendezvous.heartbeat_timeout = as_string(v); }},
      // [ssh]
      {.path = "ssh.hosts",
       .kind = K::StringList,
       .flags = "--hosts",
       .help = "hosts: \"host\", \"host:slots\", \"user@host:slots\" (flag: a:8,b:8)",
       .apply = [](JobSpec& s, const S& v) { s.ssh.hosts = split_commas(as_list(v)); }},
      {.path = "ssh.hostfile",
       .flags = "--hostfile",
       .help = "hostfile (OpenMPI/DeepSpeed \"host slots=N\" or MPICH \"host:N\")",
       .apply = [](JobSpec& s, const S& v) { s.ssh.hostfile = as_string(v); }},
      {.path = "ssh.include",
       .flags = "--include",
       .help = "only these hosts/devices, DeepSpeed style: \"a:0,2@b\"",
       .apply = [](JobSpec& s, const S& v) { s.ssh.include = as_string(v); }},
      {.path = "ssh.exclude",
       .flags = "--exclude",
       .help = "not these hosts/devices: \"b:1\"",
       .apply = [](JobSpec& s, const S& v) { s.ssh.exclude = as_string(v); }},
      {.path = "ssh.user",
       .flags = "--ssh-user",
       .help = "login for hosts listed without user@",
       .apply = [](JobSpec& s, const S& v) { s.ssh.user = as_string(v); }},
      {.path = "ssh.port",
       .kind = K::Int,
       .flags = "--ssh-port",
       .help = "port of the hosts' ssh servers (ssh -p), for hosts listed without one",
       .min = 1,
       .max = 65535,
       .apply = [](JobSpec& s, const S& v) { s.ssh.port = to_int(v); }},
      {.path = "ssh.identity",
       .flags = "--ssh-identity",
       .help = "private key file (ssh -i)",
       .apply = [](JobSpec& s, const S& v) { s.ssh.identity = as_string(v); }},
      {.path = "ssh.config_file",
       .flags = "--ssh-config",
       .help = "an ssh configuration file (ssh -F); ~/.ssh/config otherwise",
       .apply = [](JobSpec& s, const S& v) { s.ssh.config_file = as_string(v); }},
      {.path = "ssh.options",
       .kind = K::StringList,
       .flags = "--ssh-option",
       .help = "options for ssh -o: [\"KEY=VALUE\", ...] (flag: repeat it); they win over sgpu's defaults",
       .apply = [](JobSpec& s, const S& v) { s.ssh.options = as_list(v); }},
      {.path = "ssh.connect_timeout",
       .kind = K::Duration,
       .flags = "--ssh-connect-timeout",
       .help = "time to reach a host (ssh ConnectTimeout, default 10s)",
       .none_ok = false,
       .apply = [](JobSpec& s, const S& v) { s.ssh.connect_timeout = as_string(v); }},
      {.path = "ssh.max_parallel",
       .kind = K::Int,
       .flags = "--ssh-parallel",
       .help = "hosts connecting at once (default 32)",
       .min = 1,
       .max = 4096,
       .apply = [](JobSpec& s, const S& v) { s.ssh.max_parallel = to_int(v); }},
      {.path = "ssh.forward_env",
       .kind = K::StringList,
       .flags = "-x",
       .help = "more variables for every host: NAME (its value here) or NAME=value (flag: repeat it)",
       .apply = [](JobSpec& s, const S& v) { s.ssh.forward_env = as_list(v); }},
      {.path = "ssh.env_files",
       .kind = K::StringList,
       .flags = "--env-file",
       .help = "files of NAME=value lines to forward to every host (flag: repeat it)",
       .apply = [](JobSpec& s, const S& v) { s.ssh.env_files = as_list(v); }},
      {.path = "ssh.sync",
       .flags = "--sync",
       .help = "directory shipped to every node, where the job then runs",
       .apply = [](JobSpec& s, const S& v) { s.ssh.sync = as_string(v); }},
      {.path = "ssh.sync_exclude",
       .kind = K::StringList,
       .flags = "--sync-exclude",
       .help = "patterns left out of ssh.sync, gitignore syntax (flag: repeat it)",
       .apply = [](JobSpec& s, const S& v) { s.ssh.sync_exclude = as_list(v); }},
      {.path = "ssh.ship_sgpu",
       .kind = K::Bool,
       .flags = "--ship-sgpu",
       .help = "copy this sgpu binary to hosts that lack one",
       .apply = [](JobSpec& s, const S& v) { s.ssh.ship_sgpu = as_bool(v); }},
      // [slurm]
      {.path = "slurm.partition",
       .flags = "--partition",
       .help = "SLURM partition for a new allocation (--backend slurm)",
       .apply = [](JobSpec& s, const S& v) { s.slurm.partition = as_string(v); }},
      {.path = "slurm.account",
       .flags = "--account",
       .help = "SLURM account for a new allocation",
       .apply = [](JobSpec& s, const S& v) { s.slurm.account = as_string(v); }},
      {.path = "slurm.qos",
       .flags = "--qos",
       .help = "SLURM QoS for a new allocation",
       .apply = [](JobSpec& s, const S& v) { s.slurm.qos = as_string(v); }},
      {.path = "slurm.constraint",
       .flags = "--constraint",
       .help = "SLURM node features for a new allocation, e.g. h100&ib",
       .apply = [](JobSpec& s, const S& v) { s.slurm.constraint = as_string(v); }},
      {.path = "slurm.reservation",
       .flags = "--reservation",
       .help = "SLURM reservation for a new allocation",
       .apply = [](JobSpec& s, const S& v) { s.slurm.reservation = as_string(v); }},
      {.path = "slurm.pool",
       .kind = K::Choice,
       .flags = "--pool",
       .env = "SGPU_POOL",
       .help = "GPU pool: reserved or on-demand, the partition/QoS that [slurm.pools] names for it",
       .choices = {"reserved", "on-demand"},
       .apply = [](JobSpec& s, const S& v) { s.slurm.pool = as_string(v); }},
      {.path = "slurm.pools.reserved.partition",
       .apply = [](JobSpec& s, const S& v) { s.slurm.reserved_partition = as_string(v); }},
      {.path = "slurm.pools.reserved.qos",
       .apply = [](JobSpec& s, const S& v) { s.slurm.reserved_qos = as_string(v); }},
      {.path = "slurm.pools.on_demand.partition",
       .apply = [](JobSpec& s, const S& v) { s.slurm.on_demand_partition = as_string(v); }},
      {.path = "slurm.pools.on_demand.qos",
       .apply = [](JobSpec& s, const S& v) { s.slurm.on_demand_qos = as_string(v); }},
      {.path = "slurm.extra_args",
       .kind = K::StringList,
       .flags = "--slurm-arg",
       .help = "more arguments for salloc when sgpu asks for an allocation, each passed as given "
               "(flag: repeat it, one argument per use: --slurm-arg=--exclusive)",
       .apply = [](JobSpec& s, const S& v) { s.slurm.extra_args = as_list(v); }},
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
       .apply = [](JobSpec& s, const S& v) { s.mlflow.timeout = as_string(v); }},
  };
}

}  // namespace

const std::vector<KeyInfo>& spec_keys() {
  static const std::vector<KeyInfo> keys = make_keys();
  return keys;
}

}  // namespace sgpu::launcher
