// `sgpu agent` and a static node: one Agent on a loop of its own, run to
// its end, and what its end means for the command's exit code.
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
  return result;
}

int report_agent_result(const AgentResult& result) {
  if (!result.finished) throw Error(result.message, result.exit_code);
  if (result.exit_code != 0) diagnostic("sgpu: the run ended: {}\n", result.message);
  return result.exit_code;
}

}  // namespace sgpu::launcher
