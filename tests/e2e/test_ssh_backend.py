"""sgpu launch --backend ssh against real sshd test hosts (ssh_hosts.py):
agents started over the system ssh client, a DDP job across hosts, the
environment and arguments that reach remote ranks, and the faults that must
tear everything down, name the host and keep the root cause's exit code."""
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import time

import pytest

import ssh_hosts
from conftest import ROOT, TORCH_PYTHON, assert_one_exit_code, python_program, sgpu_bin
from ssh_hosts import SshHosts

pytestmark = pytest.mark.skipif(ssh_hosts.usable() is not None, reason=str(ssh_hosts.usable()))

BIN_DIR = os.path.dirname(sgpu_bin()) if os.path.exists(os.path.dirname(sgpu_bin())) else ""
# The hosts' ssh sessions find sgpu on their PATH, as on an installed cluster.
WITH_SGPU = {"PATH": f"{BIN_DIR}:/usr/local/bin:/usr/bin:/bin"}


def launch(hosts, sgpu, *args, timeout=240, wait=True, **kw):
    argv = [sgpu.bin, "launch", "--backend", "ssh", "--ssh-config", hosts.ssh_config(),
            "--ssh-option", f"ControlPath={hosts.dir}/cm-%C", *map(str, args)]
    if not wait:
        return subprocess.Popen(argv, env=sgpu.env, cwd=kw.get("cwd", sgpu.cwd), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return subprocess.run(argv, env=kw.get("env", sgpu.env), cwd=kw.get("cwd", sgpu.cwd), capture_output=True,
                          text=True, timeout=timeout)


def host_list(hosts, n=None):
    return ",".join(h.addr for h in hosts.hosts[:n])


def job_processes(host):
    """sgpu agents and ranks still running on a host (sshd itself is not the job)."""
    left = []
    for pid in host.pids():
        try:
            if pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue  # exited, its parent (sshd) not done reaping it: nothing runs
            cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "sshd" not in cmd:
            left.append(cmd)
    return left


def wait_for_ranks(p, n):
    """Reads sgpu's output until `n` ranks said "up": every agent and rank is running."""
    seen = []
    for line in p.stdout:
        if line.rstrip().endswith("up"):
            seen.append(line)
            if len(seen) == n:
                return
    raise AssertionError(f"sgpu ended before {n} ranks started: {p.stderr.read()}")


UP_THEN_SLEEP = ["--no-python", "/bin/sh", "-c", "echo up; exec sleep 300"]


def final_loss(text):
    m = re.findall(r"final loss (\d+\.\d+)", text)
    assert m, text
    return m[-1]


def test_ddp_on_two_hosts_matches_one_host(sgpu):
    script = str(ROOT / "examples" / "ddp_mlp.py")
    local = sgpu.run("launch", "--nproc", 4, script, "--epochs", 2, timeout=300)
    assert local.returncode == 0, local.stderr
    with SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        res = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 2, script, "--epochs", 2)
        assert res.returncode == 0, res.stderr
        assert final_loss(res.stdout) == final_loss(local.stdout)
        for h in hosts.hosts:
            assert job_processes(h) == [], h.name


def test_hosts_sharing_a_hostname_on_127_0_1_1_run_gloo_over_ssh_without_an_interface_set(sgpu, tmp_path):
    # As from one image: both hosts are gpu-node, resolving to 127.0.1.1, each
    # with a second interface that reaches no other host. gloo, left to
    # choose, binds loopback and init_process_group hangs; sgpu gives each
    # node the interface its kernel routes MASTER_ADDR through.
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    with SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}, hostname="gpu-node", second_net=True) as hosts:
        res = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "--timeout", "90s", "-x", "OUT_DIR",
                     "-o", "json", python_program("store_job.py"), env=env)
        assert res.returncode == 0, res.stderr
        assert [(out / f"{r}.txt").read_text().split()[1] for r in range(2)] == ["3"] * 2  # 1+2, over eth0
        routes = json.loads(res.stdout)["spec"]["routes"]
        assert [r["interface"] for r in routes] == ["eth0", "eth0"], routes
        for h in hosts.hosts:
            assert job_processes(h) == [], h.name


def test_arguments_and_environment_reach_remote_ranks_unchanged(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env_file = tmp_path / "vars.env"
    env_file.write_text("FROM_FILE='file value'\nexport ALSO=2\n")
    hostile = ["a b", "it's", "$(touch /tmp/sgpu-pwned)", "; echo x", "line1\nline2", "", "*", "back\\slash"]
    env = dict(sgpu.env, OUT_DIR=str(out), NCCL_DEBUG="WARN", HF_HOME="/data/hf", LOCAL_ONLY="no",
               PICKED="yes")
    with SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        res = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "-x", "OUT_DIR", "-x", "PICKED", "-x", "SET=v=1",
                     "--env-file", env_file, "--no-python", TORCH_PYTHON, python_program("dump_args.py"), *hostile,
                     env=env)
        assert res.returncode == 0, res.stderr
    assert not os.path.exists("/tmp/sgpu-pwned")
    for rank in range(2):
        got = json.loads((out / f"args-{rank}.json").read_text())
        assert got["argv"] == hostile
        e = got["env"]
        assert e["NCCL_DEBUG"] == "WARN" and e["HF_HOME"] == "/data/hf"  # the allowlist
        assert e["PICKED"] == "yes" and e["SET"] == "v=1"  # -x NAME, -x NAME=value
        assert e["FROM_FILE"] == "file value" and e["ALSO"] == "2"  # --env-file
        assert "LOCAL_ONLY" not in e  # not forwarded unless asked
        assert "SGPU_RDZV_SECRET" not in e  # ranks never see the run secret
        assert e["NODE_RANK"] == str(rank) and e["WORLD_SIZE"] == "2"


def test_restarts_start_every_hosts_ranks_again(sgpu, tmp_path):
    # Rank 1 (the second host) fails on attempt 0; the agents stay connected
    # and start their ranks again on the launcher's word.
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out), FAIL_UNTIL="1", FAIL_RANK="1")
    with SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        res = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "-x", "OUT_DIR", "-x", "FAIL_UNTIL",
                     "-x", "FAIL_RANK", "--max-restarts", 1, "--restart-backoff", "50ms", "--no-python", TORCH_PYTHON,
                     python_program("restart_job.py"), env=env)
        assert res.returncode == 0, res.stderr
        assert all(job_processes(h) == [] for h in hosts.hosts)
    assert sorted(p.name for p in out.glob("seen-*")) == ["seen-0-0.txt", "seen-0-1.txt", "seen-1-0.txt",
                                                          "seen-1-1.txt"]
    assert "restart 1 of 1 in 50ms" in res.stderr


def process_tree(pid):
    out = [pid]
    for child in pathlib.Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        out += process_tree(int(child))
    return out


def test_secret_is_on_no_command_line(sgpu, tmp_path):
    with SshHosts(1, host_env={0: WITH_SGPU}) as hosts:
        p = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, *UP_THEN_SLEEP, wait=False)
        try:
            wait_for_ranks(p, 1)
            assert any(" agent " in c for c in job_processes(hosts.hosts[0]))
            secrets = []
            for pid in hosts.hosts[0].pids():
                for var in pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    if var.startswith(b"SGPU_RDZV_SECRET="):
                        secrets.append(var.split(b"=", 1)[1])
            assert secrets and all(len(s) >= 32 for s in secrets)  # the agent has it, from its environment
            for pid in [*hosts.hosts[0].pids(), *process_tree(p.pid)]:
                try:
                    cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                assert not any(s in cmdline for s in secrets), cmdline
        finally:
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=60)
    assert p.returncode == 130


def test_an_unreachable_host_is_named_and_exits_255(sgpu):
    with SshHosts(1, host_env={0: WITH_SGPU}) as hosts:
        res = launch(hosts, sgpu, "-o", "json", "--hosts", f"{hosts.hosts[0].addr},{hosts.unused_addr()}", "--nproc",
                     1, "--ssh-connect-timeout", 2, "--no-python", "sleep", "30")
        assert res.returncode == 255, res.stderr
        # A run that could not start still answers: -o json and summary.json say 255 too.
        assert_one_exit_code(255, home=sgpu.env, stdout=res.stdout)
        assert json.loads(res.stdout)["status"] == "not_started"
        assert f"cannot reach {hosts.unused_addr()} (--hosts entry 2) over ssh" in res.stderr
        assert job_processes(hosts.hosts[0]) == []


def test_a_refused_key_is_named_and_exits_255(sgpu):
    with SshHosts(2, authorized={0}, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        res = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "--no-python", "sleep", "30")
        assert res.returncode == 255, res.stderr
        assert f"cannot reach {hosts.hosts[1].addr}" in res.stderr and "Permission denied" in res.stderr
        assert job_processes(hosts.hosts[0]) == []


def test_ctrl_c_while_a_host_is_still_connecting_ends_at_once_and_leaves_nothing(sgpu, tmp_path):
    # One host's agent has joined; the other's ssh hangs before it connects
    # (a ProxyCommand that never answers), with a long --ssh-connect-timeout.
    # Ctrl-C must not wait for that ssh, and must leave nothing on either side.
    with SshHosts(1, host_env={0: WITH_SGPU}) as hosts:
        config = tmp_path / "ssh_config"
        config.write_text("Host hanging\n  ProxyCommand sleep 4321\n\n" + pathlib.Path(hosts.ssh_config()).read_text())
        argv = [sgpu.bin, "launch", "--backend", "ssh", "--ssh-config", str(config), "--ssh-option",
                f"ControlPath={hosts.dir}/cm-%C", "--ssh-connect-timeout", "120", "--hosts",
                f"{hosts.hosts[0].addr},hanging", "--nproc", "1", "--no-python", "true"]
        p = subprocess.Popen(argv, env=sgpu.env, cwd=sgpu.cwd, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        seen = []
        for line in p.stderr:  # the rendezvous's progress line, 5 s in
            seen.append(line)
            if "1 of 2 joined" in line:
                break
        else:
            raise AssertionError(f"sgpu ended before one node joined: {''.join(seen)}")
        assert any(" agent " in c for c in job_processes(hosts.hosts[0]))
        p.send_signal(signal.SIGINT)
        started = time.monotonic()
        _, err = p.communicate(timeout=60)
        took = time.monotonic() - started
        assert p.returncode == 130, "".join(seen) + err
        assert "interrupted by SIGINT" in err, err
        assert took < 10, f"Ctrl-C took {took:.1f} s"
        assert job_processes(hosts.hosts[0]) == []
        # ssh killed before it connects leaves its ProxyCommand: sgpu stops ssh's whole group.
        assert subprocess.run(["pgrep", "-f", "sleep 4321"], capture_output=True).returncode == 1


def test_a_host_without_sgpu_is_named_or_gets_a_copy(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    with SshHosts(2, host_env={0: WITH_SGPU}) as hosts:
        res = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "-x", "OUT_DIR",
                     python_program("dump_env.py"), env=env)
        assert res.returncode == 127, res.stderr
        assert f"sgpu is not installed on {hosts.hosts[1].addr}" in res.stderr and "--ship-sgpu" in res.stderr
        res = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "--ship-sgpu", "-x", "OUT_DIR",
                     python_program("dump_env.py"), env=env)
        assert res.returncode == 0, res.stderr
        assert (out / "env-1.json").exists()


def recording_sgpu(tmp_path):
    """A PATH whose `sgpu` runs the real one and appends its exit code to
    codes/<hostname>: what each host's agent exited with, as its ssh session
    and anything watching the host would see it."""
    wrapper_dir, codes = tmp_path / "wrapped", tmp_path / "codes"
    wrapper_dir.mkdir()
    codes.mkdir()
    wrapper = wrapper_dir / "sgpu"
    wrapper.write_text(f'#!/bin/sh\n"{sgpu_bin()}" "$@"\nrc=$?\necho $rc >>"{codes}/$(hostname)"\nexit $rc\n')
    wrapper.chmod(0o755)
    return {"PATH": f"{wrapper_dir}:/usr/local/bin:/usr/bin:/bin"}, codes


def test_an_agent_killed_by_hand_ends_the_job_everywhere(sgpu, tmp_path):
    # Node 0's agent exits with the verdict the launcher sent; it must be
    # sgpu's own code, the lost node's explained end (read from the code, the
    # verdict could go out before ssh said how the node ended: 1, not 137).
    recording, codes = recording_sgpu(tmp_path)
    with SshHosts(2, host_env={0: recording, 1: WITH_SGPU}) as hosts:
        p = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 2, "--grace", "5s", *UP_THEN_SLEEP,
                   wait=False)
        victim = hosts.hosts[1]
        wait_for_ranks(p, 4)
        agents = victim.agent_pids()
        assert agents, job_processes(victim)
        os.kill(agents[0], signal.SIGKILL)
        _, err = p.communicate(timeout=120)
        assert p.returncode == 137, err
        assert victim.addr in err and "SIGKILL" in err
        assert_one_exit_code(137, home=sgpu.env)
        for h in hosts.hosts:
            assert job_processes(h) == [], h.name
        assert (codes / hosts.hosts[0].name).read_text().split() == ["137"]


def test_a_host_that_dies_mid_run_ends_the_job_everywhere(sgpu):
    with SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        p = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 2, "--grace", "5s", "--heartbeat-timeout", "2s",
                   "--ssh-option", "ServerAliveInterval=1", *UP_THEN_SLEEP,
                   wait=False)
        victim = hosts.hosts[1]
        wait_for_ranks(p, 4)
        hosts.kill_host(victim)
        _, err = p.communicate(timeout=120)
        assert p.returncode != 0, err
        assert victim.addr in err, err
        assert job_processes(hosts.hosts[0]) == []


def test_sync_ships_the_directory_without_ignored_files(sgpu, tmp_path):
    project = tmp_path / "proj it's"
    (project / "build").mkdir(parents=True)
    (project / ".gitignore").write_text("build/\n*.ckpt\n")
    (project / "build" / "big.o").write_text("x")
    (project / "model.ckpt").write_text("x")
    (project / "secret.txt").write_text("x")
    (project / "train.py").write_text(
        "import json, os\n"
        "open(os.path.join(os.environ['OUT_DIR'], f\"ls-{os.environ['RANK']}.json\"), 'w').write(\n"
        "    json.dumps({'cwd': os.getcwd(), 'files': sorted(os.listdir('.'))}))\n")
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    with SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        res = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "-x", "OUT_DIR", "--sync", project, "--sync-exclude",
                     "secret.txt", "train.py", env=env, cwd=project)
        assert res.returncode == 0, res.stderr
    for rank in range(2):
        got = json.loads((out / f"ls-{rank}.json").read_text())
        assert got["files"] == [".gitignore", "train.py"]
        assert got["cwd"] != str(project) and "/.cache/sgpu/sync/" in got["cwd"]
        # Each run's copy is removed once its agent ends (the hosts share this file system).
        assert not os.path.exists(got["cwd"]), got["cwd"]


def test_rdzv_endpoint_says_where_agents_reach_the_launcher(sgpu):
    # Behind ProxyJump or NAT the address an ssh session comes from is not the
    # launcher's: --rdzv-endpoint names the one the hosts must dial.
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    with SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        good = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "--rdzv-endpoint",
                      f"{hosts.client_addr}:{port}", "--no-python", "/bin/sh", "-c", "echo $MASTER_ADDR")
        assert good.returncode == 0, good.stderr
        # Nothing listens at this address: the agents cannot join, and the join timeout names them.
        bad = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "--rdzv-endpoint",
                     f"{hosts.unused_addr()}:{port}", "--join-timeout", "3s", "--no-python", "true")
        assert bad.returncode != 0, bad.stderr
        assert hosts.hosts[0].addr in bad.stderr or hosts.hosts[1].addr in bad.stderr, bad.stderr
        for h in hosts.hosts:
            assert job_processes(h) == []


def test_preflight_only_checks_every_hosts_gpus_through_ssh(sgpu, tmp_path):
    # Each host's sshd gives its sessions the fake driver libraries (the hosts
    # share this machine's files): the agents check the GPUs, node 0's NCCL id
    # reaches the other host through the rendezvous, and nothing else runs.
    from test_doctor import fake_libs
    dirs = fake_libs()
    gpus = dict(WITH_SGPU, SGPU_FAKE_DRIVER_GPUS="2", SGPU_FAKE_NCCL_DIR=str(tmp_path),
                LD_LIBRARY_PATH=":".join(str(dirs[n]) for n in ("cuda", "nccl", "nvml")))
    with SshHosts(2, host_env={0: gpus, 1: dict(gpus, SGPU_FAKE_DRIVER_ECC="1:4")}) as hosts:
        a, b = (h.addr for h in hosts.hosts)
        res = launch(hosts, sgpu, "--hosts", f"{a}:2,{b}:2", "--gpus", 4, "--preflight-only",
                     "--set", "preflight.max_bytes=64K", "--set", "preflight.iters=2")
        assert all(job_processes(h) == [] for h in hosts.hosts)
    assert res.returncode == 1, res.stdout + res.stderr
    assert re.search(r"^sgpu doctor: 4 GPUs on 2 nodes, NCCL 2\.28\.9, ", res.stdout), res.stdout
    assert f"{b} GPU 1 (00000000:19:00.0): 4 uncorrectable ECC errors since the driver loaded" in res.stdout
    assert f"{a} GPU 1" not in res.stdout.split("FAIL")[1]
