// sgpu: run a distributed training entrypoint on N GPUs. Errors a user can
// act on are thrown as sgpu::Error and printed here, in one place; so is the
// -o json document of an ending that printed none.
#include <algorithm>
#include <array>
#include <csignal>
#include <sstream>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "commands.hpp"
#include "ending.hpp"
#include "sgpu/env/error.hpp"
#include "sgpu/launcher/io/print.hpp"
#include "sgpu/launcher/process/orphan_reaper.hpp"
#include "sgpu_version.hpp"
#include "startup.hpp"

namespace {
using sgpu::launcher::diagnostic;

// CLI11's own answers (--help, --version, its exit codes) go through
// sgpu's writes: an exception or a lost page of help must not abort it.
int cli_exit(const CLI::App& app, const CLI::Error& e) {
  std::ostringstream out;
  std::ostringstream err;
  int code = app.exit(e, out, err);
  sgpu::launcher::output(out.str());
  diagnostic(err.str());
  return code;
}

int run_command(int argc, char** argv, sgpu::app::Ending& ending) {
  CLI::App app{"sgpu: launch distributed training on N GPUs of this node or of remote nodes", "sgpu"};
  app.require_subcommand(1);
  app.set_version_flag("--version", kSgpuVersion, "The version, the commit, the build and its optional parts");
  // When the first word names a command, only that command is built: CLI11
  // makes every option of every command up front, a sixth of the CPU of a
  // launch of 8 short ranks (measured). --help, a mistyped word, completion
  // and manual (which read the whole tree) get every command.
  std::vector<std::pair<std::string, sgpu::app::Command>> run_commands;
  struct Named {
    std::string_view name;
    sgpu::app::Command (*add)(CLI::App&);
    bool alone;  // built alone when named first; completion and manual read the whole tree
    sgpu::app::Command run;
  };
  std::array<Named, 6> commands{{{"launch", sgpu::app::add_launch_command, true, {}},
                                 {"devices", sgpu::app::add_devices_command, true, {}},
                                 {"agent", sgpu::app::add_agent_command, true, {}},
                                 {"doctor", sgpu::app::add_doctor_command, true, {}},
                                 {"completion", sgpu::app::add_completion_command, false, {}},
                                 {"manual", sgpu::app::add_manual_command, false, {}}}};
  std::string_view word = argc > 1 ? argv[1] : "";
  bool is_run_command = std::find(sgpu::app::kRunCommandNames.begin(), sgpu::app::kRunCommandNames.end(), word) !=
                        sgpu::app::kRunCommandNames.end();
  bool one = is_run_command ||
             std::any_of(commands.begin(), commands.end(), [&](auto& c) { return c.alone && c.name == word; });
  for (auto& c : commands) {
    if (c.name == "completion" && (!one || is_run_command))  // the run commands' place in --help
      run_commands = sgpu::app::add_run_commands(app);
    if (!one || c.name == word) c.run = c.add(app);
  }
  // What was parsed, also before a usage error, says whether -o json was asked.
  auto asked = [&] { ending.json = sgpu::app::json_output_asked(app, ending.launch); };
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
    try {
      app.parse(head, argv);
    } catch (const CLI::ParseError&) {
      asked();
      throw;
    }
    asked();
    for (const auto& c : commands)  // got_subcommand throws for a command that was not built
      if (c.run && app.got_subcommand(std::string(c.name))) return c.run(tail);
    for (const auto& [name, command] : run_commands)
      if (app.got_subcommand(name)) return command(tail);
    return 0;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version: their text is the answer
      ending.json = false;
      return cli_exit(app, e);
    }
    ending.error = e.what();
    diagnostic("sgpu: error: {}\nRun 'sgpu --help' or 'sgpu launch --help' for the options.\n", ending.error);
    return sgpu::kExitUsage;
  } catch (const sgpu::Error& e) {
    ending.error = e.what();
    diagnostic("sgpu: error: {}\n", ending.error);
    return e.exit_code();
  } catch (const std::exception& e) {
    ending.error = e.what();
    diagnostic("sgpu: error: {}\n", ending.error);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  sgpu::app::open_standard_fds();  // first: before anything takes descriptor 0, 1 or 2
  sgpu::app::give_back_relocation_table();
  // A closed pipe is a failed write sgpu reports, never its death; ranks and
  // other children get the default back before exec (process/spawn.cpp).
  std::signal(SIGPIPE, SIG_IGN);
  sgpu::launcher::become_subreaper();
  auto& ending = sgpu::app::ending();
  int code = run_command(argc, argv, ending);
  sgpu::app::print_json_ending(ending, code);
  for (const auto& orphan : sgpu::launcher::kill_adopted_orphans())
    diagnostic("sgpu: warning: killed pid {} ({}), left running by a rank outside its process group\n", orphan.pid,
               orphan.command);
  return sgpu::launcher::exit_code_after_output(code);
}
