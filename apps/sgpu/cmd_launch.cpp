// `sgpu launch [options] (script.py | -m module | --no-python program) [args...]`
#include <cctype>
#include <csignal>
#include <deque>
#include <filesystem>
#include <memory>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>

#include "commands.hpp"
#include "launch_slurm.hpp"
#include "multinode.hpp"
#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/devices/devices.hpp"
#include "sgpu/launcher/outputs/console.hpp"
#include "sgpu/launcher/outputs/outputs.hpp"
#include "sgpu/launcher/plan/dry_run.hpp"
#include "sgpu/launcher/plan/plan.hpp"
#include "sgpu/launcher/plan/run_dir.hpp"
#include "sgpu/launcher/process/supervisor.hpp"
#include "sgpu/launcher/spec/spec_load.hpp"
#include "sgpu/launcher/tracking/mlflow.hpp"
#include "sgpu/rendezvous/port_reservation.hpp"
#include "ssh_launch.hpp"

namespace sgpu::app {
namespace {

// The options as CLI11 parsed them. Every spec option is a Slot made from its
// schema row (spec_keys.cpp), so a new key gets its flag without code here.
struct LaunchFlags {
  struct Slot {
    const launcher::KeyInfo* key = nullptr;
    std::string flag;  // the name messages use: "--gpus"
    std::string text;
    std::vector<std::string> items;  // a list flag, once per use
    bool on = false;                 // for flags without a value
    CLI::Option* option = nullptr;
  };
  std::deque<Slot> slots;  // CLI11 keeps pointers into them
  std::string config;
  std::vector<std::string> sets;
  bool dry_run = false;
  bool standalone = false;
  int max_restarts = 0;
};

// How --help shows an option's value: "N", "DURATION", "node|per-rank".
std::string value_name(const launcher::KeyInfo& key) {
  using K = launcher::ValueKind;
  switch (key.kind) {
    case K::Int:
    case K::NodeCount:
      return "N";
    case K::RankCount:
      return "N|gpu|auto|cpu";
    case K::Duration:
      return "DURATION";
    case K::Choice: {
      std::string out;
      for (auto c : key.choices) out += (out.empty() ? "" : "|") + std::string(c);
      return out;
    }
    default:
      return "TEXT";
  }
}

void check_entrypoint_words(const std::vector<std::string>& rest) {
  if (rest.empty()) return;
  const auto& first = rest.front();
  if (first.size() > 1 && first[0] == '-') {
    auto hint = env::unsupported_torchrun_option(first);
    if (!hint.empty()) throw Error(hint);
    throw Error(
        fmt::format("unknown option '{}'; run 'sgpu launch --help' for the options (the entrypoint "
                    "and its arguments come after them)",
                    first));
  }
}

// file < SGPU_* variables < flags (and the entrypoint) < --set
launcher::ResolvedSpec resolve(const LaunchFlags& f, const std::vector<std::string>& words,
                               const env::Environment& inherited) {
  std::vector<launcher::Layer> layers;
  if (!f.config.empty()) layers.push_back(launcher::read_spec_file(f.config));
  layers.push_back(launcher::environment_layer(inherited));
  std::vector<launcher::FlagValue> given;
  for (const auto& slot : f.slots)
    if (slot.option->count() > 0)
      given.push_back({slot.key, slot.flag,
                       slot.key->kind == launcher::ValueKind::Bool ? std::string(slot.key->flag_value) : slot.text,
                       slot.items});
  layers.push_back(launcher::command_line_layer(given, words));
  layers.push_back(launcher::set_layer(f.sets));
  auto resolved = launcher::resolve_spec(layers);
  if (resolved.spec.entrypoint.target.empty())
    throw Error(
        "no entrypoint: give a script (sgpu launch train.py), a module (-m pkg.train) or a "
        "program (--no-python ./prog), or set job.entrypoint in the --config file");
  return resolved;
}

// What the launch cannot do yet, said before anything starts.
void check_available(const launcher::JobSpec& spec) {
  if (spec.backend != "local" && spec.backend != "ssh" && spec.backend != "slurm")
    throw Error(fmt::format("{}: the {} backend is not available yet; --dry-run shows its plan",
                            where_set(spec, "resources.backend", "--backend " + spec.backend), spec.backend));
}

// The program each rank runs. Remote nodes resolve their own, at launch.
std::string planned_program(const launcher::JobSpec& spec, const env::Environment& inherited, const std::string& cwd) {
  if (spec.backend == "local") return launcher::resolve_program(spec, inherited, cwd);
  if (spec.entrypoint.kind == env::Entrypoint::Kind::Executable) return spec.entrypoint.target;
  return spec.python.empty() ? "python3" : spec.python;
}

int dry_run(launcher::ResolvedSpec& resolved, const LaunchFlags& f, const env::Environment& inherited,
            const launcher::Discovery& discovery, const std::string& cwd) {
  launcher::DryRunInputs in;
  in.inventory = discovery.gpus;
  in.inherited = inherited;
  in.cwd = cwd;
  in.config = f.config;
  in.runs_root = resolved.spec.log_dir.empty() ? launcher::default_runs_root(inherited)
                                               : std::filesystem::absolute(resolved.spec.log_dir).string();
  try {
    in.executable = planned_program(resolved.spec, inherited, cwd);
  } catch (const Error& e) {
    throw Error(e.what(), kExitUsage);  // a dry run reports problems with 2, whatever they are
  }
  auto plan = launcher::make_dry_run(resolved, in);
  fmt::print("{}", resolved.spec.output_format == "json" ? launcher::dry_run_json(plan) : launcher::dry_run_text(plan));
  return 0;
}

int run_launch(const LaunchFlags& f, const std::vector<std::string>& rest) {
  check_entrypoint_words(rest);
  if (f.max_restarts != 0)
    throw Error(
        fmt::format("--max-restarts {}: restarts are not available yet; sgpu reports the first "
                    "failure at once (use 0 or drop the option)",
                    f.max_restarts));
  auto inherited = env::current_environment();
  auto resolved = resolve(f, rest, inherited);
  auto& spec = resolved.spec;
  for (const auto& note : resolved.notes) fmt::print(stderr, "sgpu: note: {}\n", note);
  auto cwd = std::filesystem::current_path().string();
  if (!f.dry_run && use_slurm_backend(spec, inherited)) return run_slurm_launch(spec, inherited, cwd);
  launcher::Discovery discovery;
  if (spec.backend == "local") {  // remote nodes discover their own GPUs
    discovery = launcher::discover_gpus(inherited);
    launcher::resolve_nproc_mode(spec, discovery.gpus,
                                 static_cast<int>(std::max(1U, std::thread::hardware_concurrency())));
  }
  if (f.dry_run) return dry_run(resolved, f, inherited, discovery, cwd);
  check_available(spec);
  if (spec.backend == "ssh") return run_ssh_launch(spec, inherited, cwd);
  if (auto multi = static_launch_from(spec, inherited, cwd)) return run_static(*multi, discovery);

  launcher::PlanInputs in;
  in.inventory = discovery.gpus;
  in.inherited = inherited;
  in.cwd = cwd;
  int ranks = launcher::rank_count(spec, in.inventory);  // validates before anything is created
  launcher::check_output_options(spec, ranks);
  in.executable = launcher::resolve_program(spec, inherited, cwd);
  in.run_id = launcher::make_run_id();
  rendezvous::PortReservation port(spec.master_port.value_or(0));
  in.master_port = port.port();
  std::string root = spec.log_dir.empty() ? launcher::default_runs_root(inherited) : spec.log_dir;
  // Validate the whole plan before touching the disk.
  in.run_dir = (std::filesystem::absolute(root) / in.run_id).string();
  auto plan = launcher::make_plan(spec, in);
  std::vector<std::string> tracking_warnings;
  auto tracking = launcher::mlflow_config(spec, inherited, tracking_warnings);
  launcher::create_run_dir(root, in.run_id, ranks);

  if (plan.omp_defaulted && ranks > 1)
    fmt::print(stderr,
               "sgpu: note: OMP_NUM_THREADS=1 for every rank, to avoid oversubscribing the CPUs; "
               "set OMP_NUM_THREADS to tune it\n");

  std::vector<launcher::RankLaunch> launches;
  for (const auto& r : plan.ranks) launches.push_back({r.place.rank, plan.executable, plan.argv, r.env, plan.cwd});

  std::signal(SIGPIPE, SIG_IGN);
  boost::asio::io_context io(1);
  // MLflow: the run exists before any rank starts, and every rank logs into it.
  for (const auto& w : tracking_warnings) fmt::print(stderr, "sgpu: warning: {}\n", w);
  std::optional<launcher::MlflowTracker> tracker;
  std::optional<launcher::TrackedRun> tracked;
  if (tracking) {
    tracker.emplace(io, std::move(*tracking));
    tracked = tracker->begin(launcher::describe_run(spec, plan, inherited));
    if (tracked)
      for (auto& launch : launches)
        for (const auto& [name, value] : tracked->env) launch.env[name] = value;
  }
  launcher::JobOutputs outputs(io, spec, plan, inherited);
  if (tracked) outputs.set_tracking({tracked->run_id, tracked->url});
  launcher::Supervisor supervisor(io, outputs.observer(), {plan.timeout, plan.grace});
  auto outcome = supervisor.run(launches);
  int code = outputs.finish(outcome);
  if (tracker) tracker->end(launcher::describe_end(outcome, plan));
  return code;
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto flags = std::make_shared<LaunchFlags>();
  auto* cmd = app.add_subcommand("launch", "Run an entrypoint on N ranks with the torchrun environment");
  cmd->prefix_command();  // the first positional starts the job's own argv, passed untouched
  cmd->add_option("--config", flags->config, "TOML job spec (configs/ has examples); flags and --set override it");
  cmd->add_option("--set", flags->sets, "Override any spec key: --set resources.gpus=8 (repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--dry-run", flags->dry_run, "Print the resolved plan of every rank; start nothing");
  for (const auto& key : launcher::spec_keys()) {
    if (key.flags.empty()) continue;
    auto& slot = flags->slots.emplace_back();
    slot.key = &key;
    std::string names(key.flags);
    auto long_name = names.find("--");
    if (long_name == std::string::npos) long_name = 0;  // a short flag only: -x
    slot.flag = names.substr(long_name, names.find(',', long_name) - long_name);
    std::string help(key.help);
    help[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(help[0])));
    if (key.kind == launcher::ValueKind::Bool) {
      slot.option = cmd->add_flag(names, slot.on, help);
      continue;
    }
    if (key.kind == launcher::ValueKind::StringList) {
      // Repeatable, one value per use: `-x A train.py` must not take train.py too.
      slot.option = cmd->add_option(names, slot.items, help)->type_name("TEXT")->allow_extra_args(false);
      continue;
    }
    slot.option = cmd->add_option(names, slot.text, help)->type_name(value_name(key));
  }
  cmd->add_flag("--standalone", flags->standalone, "torchrun compatibility: accepted, sgpu is standalone on one node");
  cmd->add_option("--max-restarts,--max_restarts", flags->max_restarts, "torchrun compatibility: only 0 for now");
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
