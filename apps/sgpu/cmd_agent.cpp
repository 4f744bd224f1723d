// `sgpu agent --rdzv HOST:PORT [--node-rank K] [--node-name NAME]`: one node
// of a multi-node run, started by a backend (ssh, SLURM) on that node. The
// job comes from the launcher; the secret from $SGPU_RDZV_SECRET or a 0600
// file. Internal but stable: see README "sgpu agent".
#include <csignal>
#include <filesystem>

#include <fmt/format.h>

#include "commands.hpp"
#include "sgpu/env/duration.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/backend.hpp"
#include "sgpu/launcher/job/agent.hpp"
#include "sgpu/rendezvous/auth.hpp"
#include "sgpu/rendezvous/endpoint.hpp"

namespace sgpu::app {

namespace {
struct AgentFlags {
  std::string rdzv;
  std::optional<int> node_rank;
  std::string node_name;
  std::string secret_file;
  std::string join_timeout = "10m";
  const launcher::BackendInfo* step = nullptr;  // --<backend>-step: the backend whose scheduler started it
  bool watch_stdin = false;
};
}  // namespace

Command add_agent_command(CLI::App& app) {
  auto flags = std::make_shared<AgentFlags>();
  auto* cmd =
      app.add_subcommand("agent", "Run one node of a multi-node job (started by a backend; internal but stable)");
  cmd->add_option("--rdzv", flags->rdzv, "HOST:PORT of the launcher's rendezvous")->required();
  cmd->add_option("--node-rank", flags->node_rank, "This node's rank (default: the launcher chooses)");
  cmd->add_option("--node-name", flags->node_name, "This node's name in output and reports (default: its hostname)");
  cmd->add_option("--rdzv-secret-file", flags->secret_file,
                  "File (mode 0600) with the run's secret; default: $SGPU_RDZV_SECRET");
  cmd->add_option("--join-timeout", flags->join_timeout, "How long to keep trying to reach the launcher (default 10m)");
  // A backend whose scheduler starts the agents (srun) says where each one is
  // through its own environment: `--<backend>-step`, one flag per such backend.
  for (const auto& b : launcher::backends()) {
    if (b.configure_agent == nullptr) continue;
    const auto* info = &b;
    cmd->add_flag_callback(
        fmt::format("--{}-step", b.flag_name), [flags, info] { flags->step = info; },
        fmt::format("Started by the {} backend's scheduler: node rank, name and the launcher's address from its "
                    "environment (--backend {})",
                    b.name, b.flag_name));
  }
  cmd->add_flag("--watch-stdin", flags->watch_stdin,
                "Standard input is the launcher's ssh session: its end stops the ranks and the agent "
                "(exit 129) (--backend ssh)");
  return [flags](const DashTail&) {
    auto inherited = env::current_environment();
    launcher::AgentOptions o;
    o.launcher = rendezvous::parse_endpoint(flags->rdzv, "--rdzv");
    o.node_rank = flags->node_rank;
    o.node_name = flags->node_name;
    o.join_timeout = env::parse_limit(flags->join_timeout, "--join-timeout");
    o.environment = inherited;
    if (flags->step) flags->step->configure_agent(o, inherited);
    o.watch_stdin = flags->watch_stdin;
    if (o.watch_stdin && flags->secret_file == "-")
      throw Error("--watch-stdin and --rdzv-secret-file - both want standard input; give the secret another way");
    o.cwd = std::filesystem::current_path().string();
    auto secret = rendezvous::find_secret(inherited, flags->secret_file, "--rdzv-secret-file");
    std::signal(SIGPIPE, SIG_IGN);
    // SLURM's --signal (--signal-before) may come up to a minute early, before
    // the ranks start and the agent's JobControl takes SIGUSR1/SIGUSR2: their
    // default action must not end the agent. A handler, not SIG_IGN, so that
    // the ranks get the default back.
    struct sigaction quiet {};
    quiet.sa_handler = [](int) {};
    ::sigaction(SIGUSR1, &quiet, nullptr);
    ::sigaction(SIGUSR2, &quiet, nullptr);
    return launcher::report_agent_result(launcher::run_agent(std::move(o), std::move(secret)));
  };
}

}  // namespace sgpu::app
