#pragma once
// `sgpu launch --detach`: once the run is validated, planned and its run
// directory made, the launch goes on in a child in a new session (no
// controlling terminal, so closing the terminal or ending the caller does not
// reach it), stdin on /dev/null, stdout and stderr into <run dir>/console.log.
// The caller's process prints the run id (with -o json
// {"run_id", "run_dir"}) once the run is listed (its state.json exists) and
// exits 0; when the child fails before that, with its console and exit code.
#include <string>

namespace sgpu::launcher {

// Returns in the detached child only; the calling process exits in it.
// Throws sgpu::Error (exit 1) when it cannot detach; nothing has started then.
// Call it before anything asynchronous exists (no io_context, no threads).
// `name` (--name, "" for none) goes into the -o json document.
void detach_run(const std::string& run_id, const std::string& run_dir, bool json, const std::string& name = "");

}  // namespace sgpu::launcher
