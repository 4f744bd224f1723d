// `sgpu launch [options] (script.py | -m module | --no-python program) [args...]`
#include <csignal>
#include <filesystem>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>

#include "commands.hpp"
#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/console.hpp"
#include "sgpu/launcher/devices.hpp"
#include "sgpu/launcher/outputs.hpp"
#include "sgpu/launcher/plan.hpp"
#include "sgpu/launcher/run_dir.hpp"
#include "sgpu/launcher/supervisor.hpp"
#include "sgpu/rendezvous/port_reservation.hpp"

namespace sgpu::app {
namespace {

struct LaunchFlags {
  launcher::JobSpec spec;
  std::string nproc;  // a number, or torchrun's "gpu", "auto", "cpu"
  std::optional<int> gpus;
  std::string gpu_bind = "node";
  bool module = false;
  bool no_python = false;
  bool standalone = false;
  int max_restarts = 0;
  std::string nnodes = "1";
  int node_rank = 0;
  int master_port = 0;
  std::string ranks;  // --ranks 0,3
};

void apply_nproc(LaunchFlags& f, const launcher::Discovery& discovery) {
  if (f.nproc.empty()) return;
  int visible = 0;
  for (const auto& g : discovery.gpus) visible += g.visible ? 1 : 0;
  int cpus = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  if (f.nproc == "gpu") {
    if (visible == 0) throw Error("--nproc-per-node gpu: this node has no visible GPUs; give a number of CPU ranks");
    f.spec.gpus = visible;
  } else if (f.nproc == "auto") {
    if (visible > 0)
      f.spec.gpus = visible;
    else
      f.spec.nproc = cpus;
  } else if (f.nproc == "cpu") {
    f.spec.nproc = cpus;
  } else {
    try {
      std::size_t used = 0;
      int n = std::stoi(f.nproc, &used);
      if (used != f.nproc.size()) throw std::invalid_argument("trailing");
      f.spec.nproc = n;
    } catch (const std::exception&) {
      throw Error(fmt::format("--nproc {}: expected a number of ranks, or gpu, auto, cpu", f.nproc));
    }
  }
}

void take_entrypoint(LaunchFlags& f, std::vector<std::string> rest) {
  if (rest.empty())
    throw Error(
        "no entrypoint: give a script (sgpu launch train.py), a module (-m pkg.train) or a "
        "program (--no-python ./prog)");
  const auto& first = rest.front();
  if (first.size() > 1 && first[0] == '-') {
    auto hint = env::unsupported_torchrun_option(first);
    if (!hint.empty()) throw Error(hint);
    throw Error(
        fmt::format("unknown option '{}'; run 'sgpu launch --help' for the options (the entrypoint "
                    "and its arguments come after them)",
                    first));
  }
  if (f.module && f.no_python) throw Error("-m/--module and --no-python exclude each other");
  using Kind = env::Entrypoint::Kind;
  f.spec.entrypoint.kind = f.module ? Kind::Module : f.no_python ? Kind::Executable : Kind::Script;
  f.spec.entrypoint.target = first;
  f.spec.entrypoint.args.assign(rest.begin() + 1, rest.end());
}

void check_torchrun_compat(const LaunchFlags& f) {
  if (f.max_restarts != 0)
    throw Error(
        fmt::format("--max-restarts {}: restarts are not available yet; sgpu reports the first "
                    "failure at once (use 0 or drop the option)",
                    f.max_restarts));
  if (f.nnodes != "1" && f.nnodes != "1:1")
    throw Error(fmt::format("--nnodes {}: multi-node launch is not available yet; use --nnodes 1", f.nnodes));
  if (f.node_rank != 0) throw Error(fmt::format("--node-rank {}: multi-node launch is not available yet", f.node_rank));
}

int run_launch(LaunchFlags& f, const std::vector<std::string>& rest) {
  take_entrypoint(f, rest);
  check_torchrun_compat(f);
  f.spec.gpu_bind = f.gpu_bind == "per-rank" ? launcher::GpuBind::PerRank : launcher::GpuBind::Node;
  if (f.master_port != 0) f.spec.master_port = f.master_port;
  f.spec.gpus = f.gpus;

  auto inherited = env::current_environment();
  auto cwd = std::filesystem::current_path().string();
  auto discovery = launcher::discover_gpus(inherited);
  apply_nproc(f, discovery);

  launcher::PlanInputs in;
  in.inventory = discovery.gpus;
  in.inherited = inherited;
  in.cwd = cwd;
  int ranks = launcher::rank_count(f.spec, in.inventory);  // validates before anything is created
  if (!f.ranks.empty()) f.spec.console_ranks = launcher::parse_rank_list(f.ranks, "--ranks");
  launcher::check_output_options(f.spec, ranks);
  in.executable = launcher::resolve_program(f.spec, inherited, cwd);
  in.run_id = launcher::make_run_id();
  rendezvous::PortReservation port(f.spec.master_port.value_or(0));
  in.master_port = port.port();
  std::string root = f.spec.log_dir.empty() ? launcher::default_runs_root(inherited) : f.spec.log_dir;
  // Validate the whole plan before touching the disk.
  in.run_dir = (std::filesystem::absolute(root) / in.run_id).string();
  auto plan = launcher::make_plan(f.spec, in);
  launcher::create_run_dir(root, in.run_id, ranks);

  if (plan.omp_defaulted && ranks > 1)
    fmt::print(stderr,
               "sgpu: note: OMP_NUM_THREADS=1 for every rank, to avoid oversubscribing the CPUs; "
               "set OMP_NUM_THREADS to tune it\n");

  std::vector<launcher::RankLaunch> launches;
  for (const auto& r : plan.ranks) launches.push_back({r.place.rank, plan.executable, plan.argv, r.env, plan.cwd});

  std::signal(SIGPIPE, SIG_IGN);
  boost::asio::io_context io(1);
  launcher::JobOutputs outputs(io, f.spec, plan, inherited);
  launcher::Supervisor supervisor(io, outputs.observer(), {plan.timeout, plan.grace});
  return outputs.finish(supervisor.run(launches));
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto flags = std::make_shared<LaunchFlags>();
  auto* cmd = app.add_subcommand("launch", "Run an entrypoint on N ranks with the torchrun environment");
  cmd->prefix_command();  // the first positional starts the job's own argv, passed untouched
  cmd->add_option("--gpus", flags->gpus, "GPUs for the whole job, one rank per GPU");
  cmd->add_option("--nproc,--nproc-per-node,--nproc_per_node", flags->nproc,
                  "CPU ranks per node (or torchrun's gpu, auto, cpu)");
  cmd->add_option("--gpu-type", flags->spec.gpu_type, "GPU type to require, e.g. H100 (detected when omitted)");
  cmd->add_option("--gpu-bind", flags->gpu_bind, "node: every rank sees the job's GPUs; per-rank: only its own")
      ->check(CLI::IsMember({"node", "per-rank"}));
  cmd->add_option("--python", flags->spec.python, "Python interpreter (default: $SGPU_PYTHON, else python3)");
  cmd->add_flag("-m,--module", flags->module, "Run the entrypoint as a Python module (python -m)");
  cmd->add_flag("--no-python,--no_python", flags->no_python, "Run the entrypoint as a program, not with Python");
  cmd->add_option("--timeout", flags->spec.timeout, "Job time limit: 3h (default), 90m, 2h30m, 3600, none");
  cmd->add_option("--grace", flags->spec.grace, "Time between SIGTERM and SIGKILL on teardown (default 30s)");
  cmd->add_option("--master-port,--master_port", flags->master_port, "MASTER_PORT (default: a free, reserved port)");
  cmd->add_option("--log-dir,--log_dir", flags->spec.log_dir, "Parent directory of the run directory");
  cmd->add_option("--ranks", flags->ranks, "Ranks shown on the console, e.g. 0,3 or 0-3 (all are logged)");
  cmd->add_flag("--raw", flags->spec.raw_output,
                "Show one rank's output untouched, without prefix (rank 0, or the one --ranks names)");
  cmd->add_flag("--timestamps", flags->spec.timestamps, "Prefix each console line with the time it arrived");
  cmd->add_option("-o,--output", flags->spec.output_format,
                  "text (default), or json: one summary document on stdout, the job's lines on stderr")
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_flag("--standalone", flags->standalone, "torchrun compatibility: accepted, sgpu is standalone on one node");
  cmd->add_option("--max-restarts,--max_restarts", flags->max_restarts, "torchrun compatibility: only 0 for now");
  cmd->add_option("--nnodes", flags->nnodes, "torchrun compatibility: only 1 for now");
  cmd->add_option("--node-rank,--node_rank", flags->node_rank, "torchrun compatibility: only 0 for now");
  return [cmd, flags](const DashTail& tail) {
    // "--" ends sgpu's options when it comes before the entrypoint; after the
    // entrypoint it is one of the job's own arguments.
    auto words = cmd->remaining();
    if (tail) {
      if (!words.empty()) words.emplace_back("--");
      words.insert(words.end(), tail->begin(), tail->end());
    }
    return run_launch(*flags, words);
  };
}

}  // namespace sgpu::app
