#include <string>

#include <doctest/doctest.h>

#include "sgpu/launcher/process/orphan_reaper.hpp"

using namespace sgpu::launcher;

TEST_CASE("launcher::is_ssh_control_master") {
  using namespace std::string_literals;
  struct Row {
    const char* what;
    std::string cmdline;
    bool master;
  };
  const Row rows[] = {
      {"ControlPersist master", "ssh: /home/u/.ssh/sgpu-abc [mux]\0"s, true},
      {"without the trailing NUL", "ssh: /tmp/cm [mux]", true},
      {"a plain ssh client", "ssh\0-o\0ControlMaster=auto\0host\0"s, false},
      {"a rank's daemon", "sleep\0300\0"s, false},
      {"a mux title not from ssh", "python3\0x [mux]\0"s, false},
      {"empty (a zombie)", "", false},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.what));
    CHECK(is_ssh_control_master(row.cmdline) == row.master);
  }
}
