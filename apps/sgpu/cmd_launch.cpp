// `sgpu launch [options] (script.py | -m module | --no-python program) [args...]`
#include <cctype>
#include <deque>
#include <filesystem>

#include <fmt/format.h>

#include "cli_model.hpp"
#include "commands.hpp"
#include "ending.hpp"
#include "sgpu/env/command.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/launch.hpp"
#include "sgpu/launcher/spec/spec_load.hpp"

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
  bool force_new = false;
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
  if ((resolved.spec.preflight.only || resolved.spec.rendezvous.explain_network) &&
      resolved.spec.entrypoint.target.empty()) {
    // Nothing runs; the plan (GPUs, nodes) is the job's, and every node
    // checks a program it can find.
    resolved.spec.entrypoint = {env::Entrypoint::Kind::Executable, "true", {}};
  }
  if (resolved.spec.origins.contains("ssh.envs")) {
    // --envs lists or prunes the hosts' environments: no job runs.
    if (resolved.spec.backend != "ssh")
      throw Error(fmt::format("{} is about the ssh backend's hosts: add --backend ssh (with --hosts or --hostfile)",
                              resolved.spec.origins.at("ssh.envs")));
    if (resolved.spec.entrypoint.target.empty())
      resolved.spec.entrypoint = {env::Entrypoint::Kind::Executable, "true", {}};
  }
  if (resolved.spec.entrypoint.target.empty())
    throw Error(
        "no entrypoint: give a script (sgpu launch train.py), a module (-m pkg.train) or a "
        "program (--no-python ./prog), or set job.entrypoint in the --config file");
  return resolved;
}

int run_launch(const LaunchFlags& f, const std::vector<std::string>& rest) {
  launcher::LaunchRequest request;
  request.inherited = env::current_environment();
  request.resolved = resolve(f, rest, request.inherited);
  ending().json = request.resolved.spec.output_format == "json";  // --config and --set count too
  for (const auto& note : request.resolved.notes) launcher::diagnostic("sgpu: note: {}\n", note);
  request.cwd = std::filesystem::current_path().string();
  request.config = f.config;
  request.force_new = f.force_new;
  if (f.force_new && request.resolved.spec.idempotency_key.empty())
    throw Error(
        "--force-new only applies with --idempotency-key KEY (or SGPU_IDEMPOTENCY_KEY): without a key every "
        "launch starts a new run");
  std::error_code ec;
  request.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (f.dry_run) return launcher::dry_run(std::move(request));
  return launcher::launch(std::move(request));
}

}  // namespace

Command add_launch_command(CLI::App& app) {
  auto flags = std::make_shared<LaunchFlags>();
  auto* cmd = app.add_subcommand("launch", "Run an entrypoint on N ranks with the torchrun environment");
  cmd->prefix_command();  // the first positional starts the job's own argv, passed untouched
  cmd->footer(
      "\nThe entrypoint comes after the options; everything after it goes to the job untouched:\n"
      "  sgpu launch [OPTIONS] script.py [ARGS...]\n"
      "  sgpu launch [OPTIONS] -m package.module [ARGS...]\n"
      "  sgpu launch [OPTIONS] --no-python program [ARGS...]\n"
      "'--' ends the options: sgpu launch --nproc 2 -- -script-with-dash.py");
  cmd->add_option("--config", flags->config, "TOML job spec (configs/ has examples); flags and --set override it");
  cmd->add_option("--set", flags->sets, "Override any spec key: --set resources.gpus=8 (repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--dry-run", flags->dry_run, "Print the resolved plan of every rank; start nothing");
  cmd->add_flag("--force-new", flags->force_new,
                "Start a new run even when a run with the --idempotency-key is running or succeeded, or ran other "
                "work");
  // The schema's flags go in nameless groups of a few (options_of, in
  // cli_model.hpp): CLI11's check of each new name against every one before
  // it is then a few comparisons, not the whole list's. That no name is
  // taken twice across groups, which CLI11 no longer sees, is checked by
  // test_cli_surface.py's test_no_flag_name_is_taken_twice.
  cmd->formatter(std::make_shared<GroupedOptionsFormatter>());
  auto new_group = [cmd] {
    CLI::App* g = cmd->add_option_group("");
    g->set_help_flag();  // a group is born with a copy of the command's -h,--help
    return g;
  };
  constexpr std::size_t kGroupSize = 8;
  CLI::App* group = nullptr;
  for (const auto& key : launcher::spec_keys()) {
    if (key.flags.empty()) continue;
    if (flags->slots.size() % kGroupSize == 0) group = new_group();  // each flag has its slot
    auto& slot = flags->slots.emplace_back();
    slot.key = &key;
    std::string names(key.flags);
    auto long_name = names.find("--");
    if (long_name == std::string::npos) long_name = 0;  // a short flag only: -x
    slot.flag = names.substr(long_name, names.find(',', long_name) - long_name);
    std::string help(key.help);
    help[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(help[0])));
    if (key.kind == launcher::ValueKind::Bool) {
      slot.option = group->add_flag(names, slot.on, help);
      continue;
    }
    if (key.kind == launcher::ValueKind::StringList) {
      // Repeatable, one value per use: `-x A train.py` must not take train.py too.
      slot.option = group->add_option(names, slot.items, help)->type_name("TEXT")->allow_extra_args(false);
      continue;
    }
    slot.option = group->add_option(names, slot.text, help)->type_name(value_name(key));
  }
  new_group()->add_flag("--standalone", flags->standalone,  // after the schema's flags in --help
                        "torchrun compatibility: accepted, sgpu is standalone on one node");
  return [cmd, flags](const DashTail& tail) {
    // "--" ends sgpu's options when it comes before the entrypoint; after the
    // entrypoint it is one of the job's own arguments.
    auto words = cmd->remaining();
    check_entrypoint_words(words);  // only before "--": after it, "-prog" is the entrypoint
    if (tail) {
      if (!words.empty()) words.emplace_back("--");
      words.insert(words.end(), tail->begin(), tail->end());
    }
    return run_launch(*flags, words);
  };
}

}  // namespace sgpu::app
