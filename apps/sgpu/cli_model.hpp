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

// A command's options in the order they were added, those of its nameless
// option groups included. `launch` adds its ~85 options in groups of a few:
// CLI11 compares each new option with every one already in its list, a cost
// that grows with the square of the list and was half the instructions of a
// launch's own start. The groups change nothing a user sees.
std::vector<const CLI::Option*> options_of(const CLI::App& command);

// --help for a command whose options are in nameless groups: one list, as if
// they were the command's own.
class GroupedOptionsFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override;

 private:
  std::string option_sections(const CLI::App* app) const;
};

}  // namespace sgpu::app
