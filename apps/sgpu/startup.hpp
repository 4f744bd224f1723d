#pragma once
// What sgpu checks and sets up before it parses a command, and the command
// line words CLI11 would misreport.
#include <CLI/CLI.hpp>

namespace sgpu::app {

// Opens /dev/null on whichever of descriptors 0, 1 and 2 is closed
// (`sgpu launch ... 2>&-`). Otherwise the first socket or pipe sgpu opens
// takes that number, and a write meant for stderr lands in it.
void open_standard_fds();

// Gives the kernel back the pages of this binary's relocation table, which
// the loader read whole once, before main, and nothing reads again: 705 KiB
// of the portable binary's peak memory (built for glibc 2.28, it has no
// packed DT_RELR table; the developer build's packed one is a few KiB and
// holds no whole page). Only whole pages inside the table go.
void give_back_relocation_table();

// A whole number of at least `min` ("--limit 0: 0 is below 1; give a whole
// number of 1 or more"): CLI11's own ranges print DBL_MAX's 309 digits.
CLI::Validator at_least(long long min);

// A path that is not empty: "" would silently mean the default.
CLI::Validator non_empty_path();

// A number above 0, for real values ("--expect-busbw").
CLI::Validator above_zero();

// Throws sgpu::Error (exit 2) when the first word is not an option and not a
// subcommand: "unknown command 'bogus'; valid: launch, devices, agent".
void check_command_word(const CLI::App& app, int argc, char** argv);

}  // namespace sgpu::app
