#include "ssh_launch.hpp"

#include <csignal>
#include <filesystem>

#include <fmt/format.h>

#include "sgpu/env/error.hpp"
#include "sgpu/launcher/cluster_job.hpp"
#include "sgpu/launcher/console.hpp"
#include "sgpu/launcher/ssh_backend.hpp"

namespace sgpu::app {

void add_ssh_options(CLI::App* cmd, launcher::JobSpec& spec) {
  auto& s = spec.ssh;
  const char* group = "Remote hosts over ssh (--backend ssh)";
  cmd->add_option("--backend", spec.backend, "Where ranks run: local (default) or ssh")
      ->check(CLI::IsMember({"local", "ssh"}));
  cmd->add_option("--hostfile", s.hostfile, "Hosts: 'host slots=N' (OpenMPI, DeepSpeed) or 'host:N' (MPICH) lines")
      ->group(group);
  cmd->add_option("--hosts", s.hosts, "Hosts inline: a:8,b:8 or alice@a:4")->group(group);
  cmd->add_option("--include", s.include, "Only these hosts/devices, DeepSpeed style: 'a:0,2@b'")->group(group);
  cmd->add_option("--exclude", s.exclude, "Not these hosts/devices: 'b:1'")->group(group);
  cmd->add_option("--gpus-per-node", s.gpus_per_node, "GPUs (ranks) on each chosen host")->group(group);
  cmd->add_option("--ssh-nnodes", s.nnodes, "With --nproc: how many hosts (default: every host)")->group(group);
  cmd->add_option("--ssh-user", s.user, "User for hosts listed without user@")->group(group);
  cmd->add_option("--ssh-port", s.port, "Port for hosts listed without port=")->group(group);
  cmd->add_option("--ssh-identity", s.identity, "Private key (ssh -i)")->group(group);
  cmd->add_option("--ssh-config", s.config, "ssh configuration file (ssh -F; default ~/.ssh/config)")->group(group);
  cmd->add_option("--ssh-option", s.options, "ssh -o KEY=VALUE, repeatable; wins over sgpu's defaults")
      ->allow_extra_args(false)
      ->group(group);
  cmd->add_option("--ssh-parallel", s.max_parallel, "Hosts connecting at once (default 64)")->group(group);
  cmd->add_option("--ssh-connect-timeout", s.connect_timeout_s, "Seconds to reach a host (default 10)")->group(group);
  cmd->add_flag("--ship-sgpu", s.ship_sgpu, "Copy this sgpu binary to hosts that do not have it")->group(group);
  cmd->add_option("--sync", s.sync, "Ship DIR (less .gitignore'd files) to every host and run there")->group(group);
  cmd->add_option("--sync-exclude", s.sync_exclude, "Leave PATTERN out of --sync (gitignore syntax), repeatable")
      ->allow_extra_args(false)
      ->group(group);
  cmd->add_option("-x", s.env_flags, "Forward NAME (or set NAME=value) on every host, repeatable")
      ->allow_extra_args(false)
      ->group(group);
  cmd->add_option("--env-file", s.env_files, "Forward NAME=value lines of FILE, repeatable")
      ->allow_extra_args(false)
      ->group(group);
}

int run_ssh_launch(const launcher::JobSpec& spec, const std::string& cwd, env::Seconds join_timeout,
                   env::Seconds heartbeat_timeout) {
  launcher::SshLaunch in;
  in.spec = spec;
  in.inherited = env::current_environment();
  in.cwd = cwd;
  in.join_timeout = join_timeout;
  in.heartbeat_timeout = heartbeat_timeout;
  std::error_code ec;
  in.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  std::signal(SIGPIPE, SIG_IGN);
  launcher::ConsolePrinter console({});
  auto outcome = launcher::run_ssh_job(in, console);
  if (outcome.exit_code != 0) fmt::print(stderr, "sgpu: {}\n", launcher::describe_end(outcome.end, outcome.exit_code));
  return outcome.exit_code;
}

}  // namespace sgpu::app
