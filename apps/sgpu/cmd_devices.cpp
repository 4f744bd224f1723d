// `sgpu devices`: this node's GPUs as sgpu sees them.
#include <fmt/format.h>

#include "commands.hpp"
#include "sgpu/launcher/devices.hpp"

namespace sgpu::app {

Command add_devices_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "List this node's GPUs");
  return [cmd](const DashTail&) {
    (void)cmd;
    auto d = launcher::discover_gpus(env::current_environment());
    if (d.gpus.empty()) fmt::print("no GPUs: {}\n", d.note);
    for (const auto& g : d.gpus)
      fmt::print("{} {} {} {}{}\n", g.index, g.type, g.name, g.uuid, g.visible ? "" : " (hidden)");
    return 0;
  };
}

}  // namespace sgpu::app
