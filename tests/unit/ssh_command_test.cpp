#include <doctest/doctest.h>

#include "sgpu/env/error.hpp"
#include "sgpu/env/ssh_command.hpp"

using namespace sgpu::env;
using V = std::vector<std::string>;

TEST_CASE("env::remote_shell_command quotes hostile arguments for a POSIX shell") {
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

TEST_CASE("env::ssh_argv") {
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

TEST_CASE("env::check_ssh_option") {
  CHECK_NOTHROW(check_ssh_option("StrictHostKeyChecking=no", "[ssh] options"));
  CHECK_NOTHROW(check_ssh_option("ProxyJump bastion", "[ssh] options"));
  const char* bad[] = {"", "=x", "Key=", "-oProxyCommand=x", "NoValue"};
  for (const char* o : bad) {
    CAPTURE(o);
    CHECK_THROWS_WITH_AS(check_ssh_option(o, "[ssh] options"), doctest::Contains("[ssh] options: '"), sgpu::Error);
  }
}

TEST_CASE("env::agent_bootstrap_script") {
  AgentBootstrap b;
  b.secret_names = {"SGPU_RDZV_SECRET"};
  b.exports = {{"CUDA_VISIBLE_DEVICES", "0,2"}, {"ODD", "a b'c"}};
  b.cd = "/data/my run";
  b.argv = {"sgpu", "agent", "--rdzv", std::string(kLauncherAddress) + ":29400", "--node-name", "$(id)"};
  CHECK(agent_bootstrap_script(b) ==
        "IFS= read -r SGPU_RDZV_SECRET || exit 125; export SGPU_RDZV_SECRET; "
        "CUDA_VISIBLE_DEVICES=0,2; export CUDA_VISIBLE_DEVICES; ODD='a b'\\''c'; export ODD; "
        "set -- $SSH_CONNECTION; case $1 in *:*) sgpu_launcher=\"[$1]\";; *) sgpu_launcher=$1;; esac; "
        "cd '/data/my run' || exit 1; command -v sgpu >/dev/null 2>&1 || { echo \"PATH=$PATH\" >&2; exit 127; }; echo "
        "sgpu-ssh-ready; "
        "sgpu agent --rdzv \"$sgpu_launcher\":29400 --node-name '$(id)'; exit $?");
  SUBCASE("a shipped binary by path, no secrets, the launcher inside a word") {
    AgentBootstrap s;
    s.argv = {"/home/u/.cache/sgpu/bin/sgpu-ab12", "x=" + std::string(kLauncherAddress) + "/" + kLauncherAddress};
    CHECK(agent_bootstrap_script(s) ==
          "set -- $SSH_CONNECTION; case $1 in *:*) sgpu_launcher=\"[$1]\";; *) sgpu_launcher=$1;; esac; "
          ""
          "command -v /home/u/.cache/sgpu/bin/sgpu-ab12 >/dev/null 2>&1 || { echo \"PATH=$PATH\" >&2; exit 127; }; "
          "echo sgpu-ssh-ready; "
          "/home/u/.cache/sgpu/bin/sgpu-ab12 x=\"$sgpu_launcher\"/\"$sgpu_launcher\"; exit $?");
  }
}

TEST_CASE("env::classify_ssh_exit names the host and keeps the root cause's exit code") {
  const auto agent = "start the agent";
  struct Row {
    SshExit exit;
    const char* message;  // "" : a normal end
    int code;
  };
  const Row rows[] = {
      {{agent, true, false, ExitStatus::exited(255), "ssh: connect to host 10.77.0.99 port 22: No route to host\n"},
       "cannot reach h1 (hosts:1) over ssh: ssh: connect to host 10.77.0.99 port 22: No route to host",
       255},
      {{agent, true, false, ExitStatus::exited(255), "root@10.77.0.12: Permission denied (publickey).\n\n"},
       "cannot reach h1 (hosts:1) over ssh: root@10.77.0.12: Permission denied (publickey).",
       255},
      {{agent, true, false, ExitStatus::exited(127), "motd\nPATH=/usr/bin:/bin\n"},
       "sgpu is not installed on h1 (hosts:1): its ssh sessions find no 'sgpu' on the PATH (PATH=/usr/bin:/bin); "
       "install it there, or pass --ship-sgpu to copy this one",
       127},
      {{agent, true, false, ExitStatus::exited(1), "cd: /x: No such file or directory\n"},
       "starting the agent on h1 (hosts:1) failed (exit 1): cd: /x: No such file or directory",
       1},
      {{agent, true, true, ExitStatus::exited(0), ""}, "", 0},
      {{agent, true, true, ExitStatus::exited(137), "bash: line 1: 42 Killed sgpu agent\n"},
       "the agent on h1 (hosts:1) was killed by SIGKILL",
       137},
      {{agent, true, true, ExitStatus::exited(255), "Timeout, server 10.77.0.12 not responding.\n"},
       "lost the ssh connection to h1 (hosts:1): Timeout, server 10.77.0.12 not responding.",
       255},
      {{agent, true, true, ExitStatus::exited(3), ""}, "the agent on h1 (hosts:1) exited with 3", 3},
      {{"copy sgpu", false, false, ExitStatus::exited(1), "mkdir: cannot create directory: Read-only\n"},
       "copy sgpu on h1 (hosts:1) failed (exit 1): mkdir: cannot create directory: Read-only",
       1},
      {{agent, true, false, ExitStatus::killed(15), ""}, "ssh to h1 (hosts:1) was killed by SIGTERM", 143},
  };
  for (const auto& row : rows) {
    CAPTURE(std::string(row.message));
    auto failure = classify_ssh_exit("h1 (hosts:1)", row.exit);
    if (!*row.message) {
      CHECK_FALSE(failure.has_value());
      continue;
    }
    REQUIRE(failure.has_value());
    CHECK(failure->message == row.message);
    CHECK(failure->exit_code == row.code);
  }
}
