// sgpu: run a distributed training entrypoint on N GPUs. Errors a user can
// act on are thrown as sgpu::Error and printed here, in one place.
#include <cstdio>
#include <string_view>

#include <fmt/format.h>

#include "commands.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/process/orphan_reaper.hpp"
#include "startup.hpp"

namespace {

int run_command(int argc, char** argv) {
  CLI::App app{"sgpu: launch distributed training on N GPUs of this node or of remote nodes", "sgpu"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "sgpu 0.1.0");
  auto launch = sgpu::app::add_launch_command(app);
  auto devices = sgpu::app::add_devices_command(app);
  auto agent = sgpu::app::add_agent_command(app);
  auto doctor = sgpu::app::add_doctor_command(app);
  auto run_commands = sgpu::app::add_run_commands(app);
  try {
    sgpu::app::check_command_word(app, argc, argv);
    sgpu::app::DashTail tail;
    int head = argc;
    for (int i = 1; i < argc; ++i) {
      if (std::string_view(argv[i]) == "--") {
        head = i;
        tail.emplace(argv + i + 1, argv + argc);
        break;
      }
    }
    app.parse(head, argv);
    if (app.got_subcommand("launch")) return launch(tail);
    if (app.got_subcommand("devices")) return devices(tail);
    if (app.got_subcommand("agent")) return agent(tail);
    if (app.got_subcommand("doctor")) return doctor(tail);
    for (const auto& [name, command] : run_commands)
      if (app.got_subcommand(name)) return command(tail);
    return 0;
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    fmt::print(stderr, "sgpu: error: {}\nRun 'sgpu --help' or 'sgpu launch --help' for the options.\n", e.what());
    return sgpu::kExitUsage;
  } catch (const sgpu::Error& e) {
    fmt::print(stderr, "sgpu: error: {}\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "sgpu: error: {}\n", e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  sgpu::app::open_standard_fds();  // first: before anything takes descriptor 0, 1 or 2
  sgpu::launcher::become_subreaper();
  int code = run_command(argc, argv);
  for (const auto& orphan : sgpu::launcher::kill_adopted_orphans())
    fmt::print(stderr, "sgpu: warning: killed pid {} ({}), left running by a rank outside its process group\n",
               orphan.pid, orphan.command);
  return code;
}
