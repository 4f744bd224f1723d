// `sgpu agent` and a static node: one Agent on a loop of its own, run to
// its end, and what its end means for the command's exit code.
#include <csignal>

#include <boost/asio/io_context.hpp>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/job/agent.hpp"

namespace sgpu::launcher {

AgentResult run_agent(AgentOptions options, rendezvous::Secret secret) {
  boost::asio::io_context io(1);
  AgentResult result{1, "the agent ended without a result", false};
  Agent agent(io, std::move(options), std::move(secret));
  agent.start([&result](const AgentResult& r) { result = r; });
  io.run();
  // The result is decided. SLURM repeats its SIGTERM to a step's tasks, and
  // one landing while the agent's signal set is torn down (the default
  // action back) would end the process with 143 instead of the launcher's
  // code: from here a stop signal stays pending until the process exits.
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&stop, sig);
  ::sigprocmask(SIG_BLOCK, &stop, nullptr);
  return result;
}

int report_agent_result(const AgentResult& result) {
  if (!result.finished) throw Error(result.message, result.exit_code);
  if (result.exit_code != 0) diagnostic("sgpu: the run ended: {}\n", result.message);
  return result.exit_code;
}

}  // namespace sgpu::launcher
