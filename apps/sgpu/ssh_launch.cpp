#include "ssh_launch.hpp"

#include <csignal>
#include <filesystem>
#include <memory>

#include "backends/ssh/ssh_backend.hpp"
#include "multinode.hpp"
#include "sgpu/launcher/outputs/outputs.hpp"

namespace sgpu::app {

int run_ssh_launch(const launcher::JobSpec& spec, const env::Environment& inherited, const std::string& cwd) {
  const auto& r = spec.rendezvous;
  launcher::SshLaunch in;
  in.spec = spec;
  in.inherited = inherited;
  in.cwd = cwd;
  in.join_timeout =
      parse_limit(r.join_timeout, where_set(spec, "rendezvous.join_timeout", "--join-timeout " + r.join_timeout));
  in.heartbeat_timeout = parse_limit(r.heartbeat_timeout, where_set(spec, "rendezvous.heartbeat_timeout",
                                                                    "--heartbeat-timeout " + r.heartbeat_timeout));
  std::error_code ec;
  in.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::signal(SIGPIPE, SIG_IGN);
  // The console, logs and report are made once the hosts have joined and
  // the job's ranks are known; the ssh ending refines a lost node's cause.
  std::unique_ptr<launcher::JobOutputs> outputs;
  auto outcome = launcher::run_ssh_job(
      in, [&](boost::asio::io_context& io, const launcher::LaunchPlan& plan) -> launcher::JobObserver& {
        launcher::check_output_options(spec, static_cast<int>(plan.ranks.size()));
        outputs = std::make_unique<launcher::JobOutputs>(io, spec, plan, inherited);
        return outputs->observer();
      });
  return outputs->finish(outcome);
}

}  // namespace sgpu::app
