#include <doctest/doctest.h>

#include "backends/ssh/ssh_scripts.hpp"

using namespace sgpu::launcher::ssh;
using sgpu::env::ExitStatus;

TEST_CASE("ssh::agent_bootstrap_script") {
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
        "sgpu agent --rdzv \"$sgpu_launcher\":29400 --node-name '$(id)'; s=$?; exit $s");
  SUBCASE("a shipped binary by path, no secrets, the launcher inside a word") {
    AgentBootstrap s;
    s.argv = {"/home/u/.cache/sgpu/bin/sgpu-ab12", "x=" + std::string(kLauncherAddress) + "/" + kLauncherAddress};
    CHECK(agent_bootstrap_script(s) ==
          "set -- $SSH_CONNECTION; case $1 in *:*) sgpu_launcher=\"[$1]\";; *) sgpu_launcher=$1;; esac; "
          ""
          "command -v /home/u/.cache/sgpu/bin/sgpu-ab12 >/dev/null 2>&1 || { echo \"PATH=$PATH\" >&2; exit 127; }; "
          "echo sgpu-ssh-ready; "
          "/home/u/.cache/sgpu/bin/sgpu-ab12 x=\"$sgpu_launcher\"/\"$sgpu_launcher\"; s=$?; exit $s");
  }
}

TEST_CASE("ssh::agent_bootstrap_script removes the --sync copy once the agent ends") {
  AgentBootstrap b;
  b.cd = "~/.cache/sgpu/sync/run-1/sub dir";
  b.remove_after = "~/.cache/sgpu/sync/run-1";
  b.argv = {"sgpu", "agent"};
  auto script = agent_bootstrap_script(b);
  CHECK(script.starts_with("set -- $SSH_CONNECTION;"));
  CHECK(script.find("cd \"$HOME\"/'.cache/sgpu/sync/run-1/sub dir' || exit 1; ") != std::string::npos);
  CHECK(script.ends_with("sgpu agent; s=$?; cd / && rm -rf \"$HOME\"/.cache/sgpu/sync/run-1; exit $s"));
}

TEST_CASE("ssh::classify_ssh_exit names the host and keeps the root cause's exit code") {
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

TEST_CASE("ssh::ship_binary_script and unpack_script") {
  CHECK(ship_binary_script("~/.cache/sgpu/bin/sgpu-1") ==
        "f=\"$HOME\"/.cache/sgpu/bin/sgpu-1; [ -x \"$f\" ] && exit 0; mkdir -p \"${f%/*}\" && "
        "t=$(mktemp \"$f.XXXXXX\") && cat > \"$t\" && chmod 755 \"$t\" && mv -f \"$t\" \"$f\"");
  CHECK(unpack_script("/scratch/my runs/r1") ==
        "d='/scratch/my runs/r1'; [ -d \"$d\" ] && exit 0; mkdir -p \"${d%/*}\" && t=$(mktemp -d \"$d.XXXXXX\") && "
        "tar -xzf - -C \"$t\" && { mv -T \"$t\" \"$d\" 2>/dev/null || rm -rf \"$t\"; } && [ -d \"$d\" ]");
}
