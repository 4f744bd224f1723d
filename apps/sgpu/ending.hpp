#pragma once
// How a command ended, for the one -o json document every ending prints:
// the command's own (a summary, a plan, a list), or, for an ending that
// printed none (a usage error, an error before the run), the one main prints.
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace sgpu::app {

struct Ending {
  bool json = false;    // -o json was asked: by a flag, or by the launch's resolved spec
  bool launch = false;  // `sgpu launch`: the document is a summary with status not_started
  std::string error;    // the error that ended the command, if one did
};

// The one Ending of this process: main fills it in, `sgpu launch` raises
// `json` once its spec (flags, --config, --set) is resolved.
Ending& ending();

// Whether the parsed (or partly parsed, on a usage error) command line asks
// for -o json; also says whether the command is `launch`.
bool json_output_asked(const CLI::App& app, bool& launch);

// The document main prints for an ending that printed none: for launch a
// summary of a run that did not start (as summary.json's), else
// {"exit_code", "error"}.
nlohmann::ordered_json ending_document(const Ending& ending, int code);

// Prints ending_document when -o json was asked and nothing was written on
// stdout: for a launch, whatever its ending; for another command, an error.
void print_json_ending(const Ending& ending, int code);

}  // namespace sgpu::app
