#pragma once
// A helper program run to its end on the event loop (py-spy, eu-stack):
// its stdout and stderr collected, each up to a bound, and the program
// killed with its process group when it outlives its limit. The answer comes
// once, on the loop, whatever happens; a command never blocks the loop.
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/exit_code.hpp"
#include "sgpu/env/rank_env.hpp"
#include "sgpu/launcher/process/child_process.hpp"  // find_on_path

namespace sgpu::launcher {

struct CommandResult {
  std::string out;
  std::string err;
  std::optional<env::ExitStatus> status;  // unset when it could not start
  bool timed_out = false;                 // killed at the limit
  std::string start_error;                // why it could not start ("" when it did)
  bool ok() const { return status && status->success() && !timed_out; }
};

// Runs argv (argv[0] an absolute path, or a name looked up on `environment`'s
// PATH) with `environment`; `done` is posted to `io` once it ended and both
// pipes are read, or at `limit` after SIGKILL to its group.
void run_command(boost::asio::io_context& io, const std::vector<std::string>& argv, const env::Environment& environment,
                 std::chrono::milliseconds limit, std::size_t max_output, std::function<void(CommandResult)> done);

}  // namespace sgpu::launcher
