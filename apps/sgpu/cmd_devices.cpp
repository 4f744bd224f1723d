// `sgpu devices [-o json]`: this node's GPUs as sgpu sees them.
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "sgpu/launcher/devices/devices.hpp"
#include "sgpu/launcher/io/print.hpp"

namespace sgpu::app {

Command add_devices_command(CLI::App& app) {
  auto format = std::make_shared<std::string>("text");
  auto* cmd = app.add_subcommand("devices", "List this node's GPUs (index, type, memory, UUID, PCI bus, visibility)");
  cmd->add_option("-o,--output", *format, "text (default) or json (a list; [] without GPUs)")
      ->check(CLI::IsMember({"text", "json"}));
  return [format](const DashTail&) {
    auto d = launcher::discover_gpus(env::current_environment());
    if (d.source == "fake") launcher::diagnostic("sgpu: note: {}\n", d.note);
    launcher::output(*format == "json" ? launcher::devices_json(d) : launcher::devices_text(d));
    return 0;
  };
}

}  // namespace sgpu::app
