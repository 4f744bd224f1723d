#pragma once
// The CLI as data: every subcommand and option as CLI11 holds them (for
// `launch`, the spec schema's flags), for what is generated from it (shell
// completion, the man page), so neither can drift from --help.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace sgpu::app {

// What a word in a given place may be.
enum class ValueKind {
  None,    // a flag: no value
  Any,     // a value with nothing to offer (a number, a duration)
  Path,    // a file or directory
  Choice,  // one of `choices`
  Run,     // a run id (or name, or 'last')
};

struct OptionModel {
  std::vector<std::string> names;  // "--backend", "-o"
  std::string help;                // one line
  ValueKind value = ValueKind::None;
  std::vector<std::string> choices;
  std::string value_name;  // what --help shows after the names: "N", "DURATION", "local|ssh|slurm"
};

struct CommandModel {
  std::string name;
  std::string help;
  std::vector<OptionModel> options;
  ValueKind positional = ValueKind::None;  // `launch`: the entrypoint (a file), then the job's own words
  std::string footer;                      // what --help prints after the options
};

std::vector<CommandModel> model_of(const CLI::App& root);

}  // namespace sgpu::app
