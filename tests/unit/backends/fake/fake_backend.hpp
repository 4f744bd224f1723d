#pragma once
// A backend written as the README's recipe says a new one is (ARCHITECTURE.md,
// "Adding a backend"): this folder, one registry line (register_backend in
// the test) and one CMake line. It has its own settings table ([fake]), its
// own struct for it, and its nodes are started the way a scheduler starts
// agents: each is a fake that speaks the real rendezvous protocol over
// loopback, with no process anywhere. What a node does is its behaviour:
//   ok      both ranks exit 0          fail3       rank 0 exits 3
//   hang    ranks never end            vanish      the agent dies at once
//   busy    like hang, with progress   stuck       hang; rank 1 outside a collective
//   flaky   fail3 on attempt 0, then ok
//   sigterm hang, and SIGTERM to this process once its ranks started (the user's kill)
// and the launcher's word to each node is recorded (Finish's code, Inspect).
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sgpu/launcher/backend.hpp"

namespace sgpu::launcher::fake {

// [fake]: the backend's own settings.
struct Settings {
  static constexpr std::string_view kTable = "fake";
  std::vector<std::string> nodes;  // each node's behaviour, by node rank
  int lost_code = 77;              // what a vanished node's end means (as ssh's 255 does)
  bool unreachable = false;        // fail before any node starts, as an unreachable host does
};

// What the fake nodes heard and what the backend was told, reset per launch.
struct Record {
  std::vector<int> finish_codes;       // every Finish or Abort: the exit code each node's agent would have
  int stacks_asked = 0;                // Inspect{Stacks}
  int attempts_started = 0;            // Start and Restart, over every node
  std::optional<int> released;         // release(code)
  std::optional<std::string> run_dir;  // the run the engine gave run()
};
Record& record();

// The registry line's argument.
BackendInfo info();

}  // namespace sgpu::launcher::fake
