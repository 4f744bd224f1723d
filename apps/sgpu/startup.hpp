#pragma once
// What sgpu checks and sets up before it parses a command, and the command
// line words CLI11 would misreport.
#include <CLI/CLI.hpp>

namespace sgpu::app {

// Opens /dev/null on whichever of descriptors 0, 1 and 2 is closed
// (`sgpu launch ... 2>&-`). Otherwise the first socket or pipe sgpu opens
// takes that number, and a write meant for stderr lands in it.
void open_standard_fds();

// Throws sgpu::Error (exit 2) when the first word is not an option and not a
// subcommand: "unknown command 'bogus'; valid: launch, devices, agent".
void check_command_word(const CLI::App& app, int argc, char** argv);

}  // namespace sgpu::app
