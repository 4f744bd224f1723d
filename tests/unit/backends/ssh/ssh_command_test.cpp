#include <doctest/doctest.h>

#include "backends/ssh/ssh_command.hpp"
#include "sgpu/env/error.hpp"

using namespace sgpu::launcher::ssh;
using V = std::vector<std::string>;

TEST_CASE("ssh::remote_shell_command quotes hostile arguments for a POSIX shell") {
  // Each of these must reach the remote program unchanged; tests/e2e proves
  // it through a real sshd, this table pins the exact text.
  struct Row {
    V argv;
    const char* command;
  };
  const Row rows[] = {
      {{"sgpu", "agent"}, "sgpu agent"},
      {{"echo", "a b"}, "echo 'a b'"},
      {{"echo", ""}, "echo ''"},
      {{"echo", "it's"}, "echo 'it'\\''s'"},
      {{"echo", "$(id)", "`id`", "${HOME}"}, "echo '$(id)' '`id`' '${HOME}'"},
      {{"echo", "a;reboot", "a&&b", "a|b", "a>b"}, "echo 'a;reboot' 'a&&b' 'a|b' 'a>b'"},
      {{"echo", "line1\nline2"}, "echo 'line1\nline2'"},
      {{"echo", "*", "?", "[a]", "~", "#x"}, "echo '*' '?' '[a]' '~' '#x'"},
      {{"echo", "\"double\"", "back\\slash", "!bang"}, "echo '\"double\"' 'back\\slash' '!bang'"},
      {{"echo", "--flag=v", "a=b", "%1"}, "echo --flag=v a=b %1"},  // safe as arguments
      {{"A=b", "x"}, "'A=b' x"},                                    // not an assignment
      {{"%1"}, "'%1'"},                                             // not a job
      {{"/opt/my tools/sgpu"}, "'/opt/my tools/sgpu'"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.command);
    CHECK(remote_shell_command(row.argv) == row.command);
  }
}

TEST_CASE("ssh::ssh_argv") {
  HostEntry h;
  h.host = "worker-1";
  SUBCASE("defaults: batch mode, timeouts, keep-alive, no tty, no escape") {
    SshOptions o;
    CHECK(ssh_argv(o, h, "sgpu agent") == V{"ssh", "-T", "-e", "none", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                                            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", "--",
                                            "worker-1", "sgpu agent"});
  }
  SUBCASE("spec options come before sgpu's so they win; BatchMode stays first") {
    SshOptions o;
    o.config_file = "/tmp/cfg";
    o.identity = "/k/id";
    o.port = 2222;
    o.user = "svc";
    o.control_path = "/run/sgpu/cm-%C";
    o.options = {"ConnectTimeout=30", "StrictHostKeyChecking=accept-new"};
    CHECK(ssh_argv(o, h, "true") == V{"ssh",      "-F",
                                      "/tmp/cfg", "-T",
                                      "-e",       "none",
                                      "-o",       "BatchMode=yes",
                                      "-o",       "ConnectTimeout=30",
                                      "-o",       "StrictHostKeyChecking=accept-new",
                                      "-o",       "ConnectTimeout=10",
                                      "-o",       "ServerAliveInterval=5",
                                      "-o",       "ServerAliveCountMax=3",
                                      "-o",       "ControlMaster=auto",
                                      "-o",       "ControlPath=/run/sgpu/cm-%C",
                                      "-o",       "ControlPersist=60",
                                      "-i",       "/k/id",
                                      "-p",       "2222",
                                      "-l",       "svc",
                                      "--",       "worker-1",
                                      "true"});
  }
  SUBCASE("the host's own user and port win over the spec's") {
    SshOptions o;
    o.port = 2222;
    o.user = "svc";
    h.user = "alice";
    h.port = 22;
    auto argv = ssh_argv(o, h, "");
    CHECK(V(argv.end() - 6, argv.end()) == V{"-p", "22", "-l", "alice", "--", "worker-1"});
  }
}

TEST_CASE("ssh::check_ssh_option") {
  CHECK_NOTHROW(check_ssh_option("StrictHostKeyChecking=no", "[ssh] options"));
  CHECK_NOTHROW(check_ssh_option("ProxyJump bastion", "[ssh] options"));
  const char* bad[] = {"", "=x", "Key=", "-oProxyCommand=x", "NoValue"};
  for (const char* o : bad) {
    CAPTURE(o);
    CHECK_THROWS_WITH_AS(check_ssh_option(o, "[ssh] options"), doctest::Contains("[ssh] options: '"), sgpu::Error);
  }
}
