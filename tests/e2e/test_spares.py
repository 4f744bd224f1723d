"""--spares with the ssh backend: a node lost mid-run is replaced by a spare
host for the next attempt, with the same WORLD_SIZE, and training resumes
from its checkpoint (issue 32). Real sshd hosts in network namespaces."""
import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

import ssh_hosts
from conftest import ROOT, newest_summary
from test_doctor import fake_libs
from ssh_hosts import SshHosts
from test_ssh_backend import UP_THEN_SLEEP, WITH_SGPU, final_loss, host_list, job_processes, launch, wait_for_ranks

# One test at a time, after the rest (alone): each runs three ssh hosts, torch ranks
# and a restart, and times how soon the spare takes over.
pytestmark = [pytest.mark.alone, pytest.mark.skipif(ssh_hosts.usable() is not None, reason=str(ssh_hosts.usable()))]

CHECKPOINT_EXAMPLE = str(ROOT / "examples" / "ddp_checkpoint.py")


def kill_agent(host):
    agents = host.agent_pids()
    assert agents, job_processes(host)
    os.kill(agents[0], signal.SIGKILL)


@pytest.mark.parametrize("victim", [1, 0], ids=["node-1", "node-0"])
def test_a_lost_node_is_replaced_by_a_spare_and_training_resumes_from_its_checkpoint(sgpu, tmp_path, victim):
    # Node 0's loss also moves MASTER_ADDR and MASTER_PORT to the spare.
    clean = sgpu.run("launch", "--nproc", 2, CHECKPOINT_EXAMPLE, "--epochs", 3, "--checkpoint-dir", tmp_path / "clean",
                     timeout=300)
    assert clean.returncode == 0, clean.stderr
    with SshHosts(3, host_env={0: WITH_SGPU, 1: WITH_SGPU, 2: WITH_SGPU}) as hosts:
        c = hosts.hosts[2]
        lost = hosts.hosts[victim]
        kept = hosts.hosts[1 - victim]
        p = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nnodes", 2, "--nproc", 1, "--spares", 1,
                   "--max-restarts", 1, "--restart-backoff", "10ms", "--grace", "2s", CHECKPOINT_EXAMPLE,
                   "--epochs", 3, "--checkpoint-dir", tmp_path / "ckpt", "--epoch-pause", 60, wait=False)
        out = []
        for line in p.stdout:  # epoch 0 is on disk, and every rank waits: host B's agent dies now
            out.append(line)
            if "epoch 0 loss" in line:
                break
        else:
            raise AssertionError(f"no epoch ended: {''.join(out)} {p.stderr.read()}")
        assert job_processes(c) == []  # the spare is idle until it is needed
        lost_at = time.monotonic()
        kill_agent(lost)
        rest, err = p.communicate(timeout=240)
        elapsed = time.monotonic() - lost_at
        stdout = "".join(out) + rest
        assert p.returncode == 0, err
        for h in hosts.hosts:
            assert job_processes(h) == [], h.name
    assert f"node {lost.addr} (node rank {victim}) was lost" in err, err
    assert f"spare {c.addr} takes its place for attempt 1" in err, err
    assert "attempt 1: starting at epoch 1" in stdout, stdout
    assert final_loss(stdout) == final_loss(clean.stdout)  # the same WORLD_SIZE, the same training
    assert elapsed < 60, elapsed  # not the 60 s pause: attempt 0 was stopped at once
    summary = newest_summary(sgpu.env)
    assert summary["exit_code"] == 0 and summary["world_size"] == 2
    assert [a["attempt"] for a in summary["attempts"]] == [0, 1]
    assert summary["attempts"][0]["status"] == "node_lost"
    hosts_by_rank = [c.addr, kept.addr] if victim == 0 else [kept.addr, c.addr]
    assert [r["host"] for r in summary["ranks"]] == hosts_by_rank  # the lost node's rank ran on the spare
    assert [a["nodes"] for a in summary["attempts"]] == [[kept.addr, lost.addr] if victim else [lost.addr, kept.addr],
                                                         hosts_by_rank]
    (gone,) = summary["excluded"]
    assert gone["host"] == lost.addr and gone["gpu"] is None and gone["attempt"] == 1
    assert "the node was lost" in gone["reason"]
    run_dir = sorted(pathlib.Path(sgpu.env["SGPU_HOME"], "runs").glob("*/summary.json"))[-1].parent
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    started = {(e["attempt"], e["rank"]): e["host"] for e in events if e["event"] == "rank_started"}
    attempt_0 = [kept.addr, lost.addr] if victim else [lost.addr, kept.addr]
    assert started == {(0, 0): attempt_0[0], (0, 1): attempt_0[1], (1, 0): hosts_by_rank[0],
                       (1, 1): hosts_by_rank[1]}  # each attempt's events name the host its ranks ran on


def test_a_lost_node_with_no_spare_ends_the_run_at_once_saying_so(sgpu):
    with SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        p = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nproc", 1, "--max-restarts", 1, "--grace", "5s",
                   *UP_THEN_SLEEP, wait=False)
        victim = hosts.hosts[1]
        wait_for_ranks(p, 2)
        lost_at = time.monotonic()
        kill_agent(victim)
        _, err = p.communicate(timeout=120)
        assert time.monotonic() - lost_at < 30
        assert p.returncode == 137, err
        assert victim.addr in err and "no spare node was held to take its place" in err, err
        assert "restart 1 of 1" not in err
        for h in hosts.hosts:
            assert job_processes(h) == [], h.name


def test_spares_in_the_plan_and_clear_errors(sgpu):
    base = ["launch", "--backend", "ssh", "--nproc", 1, "--max-restarts", 1]
    res = sgpu.run(*base, "--hosts", "a,b,c", "--nnodes", 2, "--spares", 1, "--dry-run", "--no-python", "/bin/true")
    assert res.returncode == 0, res.stderr
    assert "spares    c (each takes a lost node's place for the next attempt)" in res.stdout
    doc = json.loads(sgpu.run(*base, "--hosts", "a,b,c", "--nnodes", 2, "--spares", 1, "--dry-run", "-o", "json",
                              "--no-python", "/bin/true").stdout)
    assert doc["spares"] == ["c"] and [n["host"] for n in doc["nodes"]] == ["a", "b"]
    # Without --nnodes, the hosts beyond the spares run the job.
    doc = json.loads(sgpu.run(*base, "--hosts", "a,b,c", "--spares", 1, "--dry-run", "-o", "json", "--no-python",
                              "/bin/true").stdout)
    assert doc["spares"] == ["c"]
    cases = [
        (["--hosts", "a,b", "--nnodes", 2, "--spares", 1],
         "--spares 1: --hosts has 0 hosts beyond the 2 the job runs on"),
        (["--hosts", "a,b", "--spares", 2], "--spares 2: --hosts lists 2 hosts, none left for the job itself"),
    ]
    for args, expected in cases:
        res = sgpu.run(*base, *args, "--no-python", "/bin/true")
        assert res.returncode == 2 and expected in res.stderr, res.stderr
    res = sgpu.run("launch", "--backend", "ssh", "--hosts", "a,b,c", "--nnodes", 2, "--nproc", 1, "--spares", 1,
                   "--no-python", "/bin/true")
    assert res.returncode == 2 and "add --max-restarts N" in res.stderr, res.stderr
    res = sgpu.run("launch", "--nproc", 1, "--spares", 1, "--max-restarts", 1, "--no-python", "/bin/true")
    assert res.returncode == 2, res.stderr
    assert "--spares 1: spare nodes are held by --backend ssh, --backend slurm for now, not by the local backend" \
        in res.stderr


@pytest.mark.parametrize("fault", ["xid", "ecc"])
def test_a_node_whose_gate_refuses_the_next_attempt_is_replaced_by_a_spare_in_that_attempt(sgpu, tmp_path, fault):
    # Fake NVML on every host, 2 GPUs each, the job 2 per node. Attempt 0: rank 2 (host B's first) makes B's GPU 1
    # report XID 79 (off the bus), or a double-bit (uncorrectable) ECC error, and fails. Before attempt 1, B's gate
    # leaves GPU 1 out and has no GPU to spare, so B cannot start it: spare C joins attempt 1 in B's place (no
    # restart spent), with the same WORLD_SIZE.
    dirs = fake_libs()
    libs = os.pathsep.join(str(dirs[k]) for k in ("cuda", "nvml"))
    xids = [tmp_path / f"xids-{k}" for k in range(3)]
    for f in xids:
        f.write_text("")
    driver_file = "SGPU_FAKE_DRIVER_XID_FILE" if fault == "xid" else "SGPU_FAKE_DRIVER_ECC_FILE"
    host_env = {k: dict(WITH_SGPU, LD_LIBRARY_PATH=libs, SGPU_FAKE_DRIVER_GPUS="2", **{driver_file: str(xids[k])})
                for k in range(3)}
    line = "1:79" if fault == "xid" else "1:2"
    job = ["--no-python", "/bin/sh", "-c",
           'echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT world $WORLD_SIZE"; '
           'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
           f'if [ "$RANK" = 2 ]; then echo {line} >> {xids[1]}; exit 1; fi; exec sleep 30; fi']
    with SshHosts(3, host_env=host_env) as hosts:
        a, b, c = hosts.hosts
        res = launch(hosts, sgpu, "--hosts", ",".join(f"{h.addr}:2" for h in hosts.hosts), "--gpus", 4,
                     "--nnodes", 2, "--gpus-per-node", 2, "--spares", 1, "--max-restarts", 1, "--restart-backoff", "0.1s",
                     *job)
        for h in hosts.hosts:
            assert job_processes(h) == [], h.name
    assert res.returncode == 0, res.stderr
    assert f"node {b.addr} (node rank 1) could not start attempt 1; spare {c.addr} takes its place in it" in res.stderr
    attempt_1 = sorted(line for line in res.stdout.splitlines() if "attempt 1" in line)
    assert attempt_1 == [f"[{a.addr}:0] rank 0 attempt 1 world 4", f"[{a.addr}:1] rank 1 attempt 1 world 4",
                         f"[{c.addr}:2] rank 2 attempt 1 world 4", f"[{c.addr}:3] rank 3 attempt 1 world 4"], res.stdout
    summary = newest_summary(sgpu.env)
    assert [a_["attempt"] for a_ in summary["attempts"]] == [0, 1]  # one restart: the replacement spent none
    assert [r["host"] for r in summary["ranks"]] == [a.addr, a.addr, c.addr, c.addr]
    assert [a_["nodes"] for a_ in summary["attempts"]] == [[a.addr, b.addr], [a.addr, c.addr]]
    gpu, node = summary["excluded"]
    reason = ("XID 79 (the GPU fell off the bus) during attempt 0" if fault == "xid"
              else "2 uncorrectable ECC errors since the driver loaded")
    assert gpu == {"host": b.addr, "gpu": 1, "reason": reason, "attempt": 1}
    assert node["host"] == b.addr and node["gpu"] is None and node["attempt"] == 1
    assert node["reason"].startswith("the node could not start attempt 1: ")
    assert "no spare GPU is left to take its place" in node["reason"]


def test_a_spare_that_cannot_take_the_place_is_said_and_the_run_ends_with_none_left(sgpu):
    # The spare is a host whose sshd refuses the key: its session fails, which is said, and with no other spare
    # the run ends naming the lost node, the spare's failure and that none is left; nothing is left running.
    with SshHosts(3, authorized={0, 1}, host_env={0: WITH_SGPU, 1: WITH_SGPU, 2: WITH_SGPU}) as hosts:
        _, b, c = hosts.hosts
        p = launch(hosts, sgpu, "--hosts", host_list(hosts), "--nnodes", 2, "--nproc", 1, "--spares", 1,
                   "--max-restarts", 1, "--grace", "5s", *UP_THEN_SLEEP, wait=False)
        wait_for_ranks(p, 2)
        kill_agent(b)
        _, err = p.communicate(timeout=120)
        for h in hosts.hosts:
            assert job_processes(h) == [], h.name
    assert p.returncode == 137, err  # the lost node's own end: its agent was killed by SIGKILL
    assert f"spare {c.addr} takes its place for attempt 1" in err, err
    assert f"spare {c.addr} cannot take node rank 1's place" in err and "Permission denied" in err, err
    assert f"node {b.addr} was lost" in err and "killed by SIGKILL" in err, err
    assert f"; spare {c.addr} could not take its place: " in err, err
    assert "no spare is left to take its place (--spares 1, all used)" in err, err


@pytest.mark.parametrize("settled", [True, False], ids=["attempt-0-over", "attempt-0-ending"])
def test_ctrl_c_while_a_spare_is_still_connecting_ends_at_once_and_leaves_nothing(sgpu, tmp_path, settled):
    # The spare's ssh never connects (a ProxyCommand that never answers); attempt 0 is over and attempt 1 waits
    # for it. Ctrl-C ends the run then, not after --ssh-connect-timeout, and stops the spare's ssh and its proxy.
    with SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        a, b = hosts.hosts
        config = tmp_path / "ssh_config"
        config.write_text("Host hanging\n  ProxyCommand sleep 4322\n\n" + pathlib.Path(hosts.ssh_config()).read_text())
        argv = [sgpu.bin, "launch", "--backend", "ssh", "--ssh-config", str(config), "--ssh-option",
                f"ControlPath={hosts.dir}/cm-%C", "--ssh-connect-timeout", "120", "--hosts",
                f"{a.addr},{b.addr},hanging", "--nnodes", "2", "--nproc", "1", "--spares", "1", "--max-restarts", "1",
                "--grace", "5s", *UP_THEN_SLEEP]
        p = subprocess.Popen(argv, env=sgpu.env, cwd=sgpu.cwd, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        wait_for_ranks(p, 2)
        kill_agent(b)
        seen = []
        for line in p.stderr:
            seen.append(line)
            if "spare hanging takes its place for attempt 1" in line:
                break
        else:
            raise AssertionError(f"no spare was asked for: {''.join(seen)}")
        if settled:  # attempt 0 torn down (A's rank gone) and its end recorded; the spare's ssh still hangs
            deadline = time.monotonic() + 30
            while any("sleep 300" in c for c in job_processes(a)):
                assert time.monotonic() < deadline, job_processes(a)
                time.sleep(0.05)
        p.send_signal(signal.SIGINT)  # else: while attempt 0 is still being torn down
        started = time.monotonic()
        _, err = p.communicate(timeout=60)
        took = time.monotonic() - started
        assert p.returncode == 130, "".join(seen) + err
        assert took < 10, f"Ctrl-C took {took:.1f} s"
        for h in hosts.hosts:
            assert job_processes(h) == [], h.name
        assert subprocess.run(["pgrep", "-f", "sleep 4322"], capture_output=True).returncode == 1
