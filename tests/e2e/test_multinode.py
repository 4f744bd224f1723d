"""Multi-node runs with every node on this machine, over loopback: node 0 is
a static `sgpu launch`, the others static launches or `sgpu agent`s."""
import json
import pathlib
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import ROOT, TORCH_PYTHON, assert_one_exit_code, newest_summary, python_program
from multinode import agent, all_dead, free_port, make_secret_file, read_pids, static_node, wait_for

WRITE_PID = 'echo $$ > "$OUT_DIR/pid-$RANK"; '


@pytest.fixture
def rdzv(tmp_path):
    port = free_port()
    return f"127.0.0.1:{port}", make_secret_file(tmp_path / "secret")


@pytest.fixture
def out(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return d


def test_every_rank_of_every_node_gets_its_place(sgpu, rdzv, out):
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out))
    # Nodes may differ: one rank on node 0, three on node 1.
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 1, python_program("dump_env.py"), env=env)
    n1 = static_node(sgpu, 2, 1, endpoint, secret, "--nproc", 3, python_program("dump_env.py"), env=env)
    o0, e0 = n0.communicate(timeout=120)
    o1, e1 = n1.communicate(timeout=120)
    assert n0.returncode == 0, e0
    assert n1.returncode == 0, e1
    envs = [json.loads((out / f"env-{r}.json").read_text()) for r in range(4)]
    port = envs[0]["MASTER_PORT"]
    run_id = envs[0]["SGPU_RUN_ID"]
    for r, e in enumerate(envs):
        node = 0 if r == 0 else 1
        assert e["RANK"] == e["ROLE_RANK"] == str(r)
        assert e["LOCAL_RANK"] == str(r - (0 if node == 0 else 1))
        assert e["WORLD_SIZE"] == e["ROLE_WORLD_SIZE"] == "4"
        assert e["LOCAL_WORLD_SIZE"] == ("1" if node == 0 else "3")
        assert e["NODE_RANK"] == e["GROUP_RANK"] == str(node)
        assert e["NNODES"] == e["GROUP_WORLD_SIZE"] == "2"
        assert e["MASTER_ADDR"] == "127.0.0.1" and e["MASTER_PORT"] == port
        assert e["SGPU_RUN_ID"] == e["TORCHELASTIC_RUN_ID"] == run_id
        assert e["TORCHELASTIC_ERROR_FILE"].endswith(f"/runs/{run_id}/ranks/{r}/error.json")
        assert "SGPU_RDZV_SECRET" not in e  # ranks run user code: they never see the secret
    assert 0 < int(port) < 65536 and port != endpoint.rsplit(":", 1)[1]


def test_output_of_every_node_reaches_the_launcher_with_host_prefixes(sgpu, rdzv):
    endpoint, secret = rdzv
    prog = ["--nproc", 2, "--no-python", "sh", "-c", 'echo "rank $RANK on node $NODE_RANK"; printf "tail $RANK"']
    n0 = static_node(sgpu, 2, 0, endpoint, secret, *prog)
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", "--node-rank", 1)
    o0, e0 = n0.communicate(timeout=60)
    o1, e1 = a1.communicate(timeout=60)
    assert n0.returncode == 0 and a1.returncode == 0, (e0, e1)
    host = socket.gethostname()
    lines = sorted(o0.splitlines())
    assert lines == sorted([f"[{host}:0] rank 0 on node 0", f"[{host}:0] tail 0", f"[{host}:1] rank 1 on node 0",
                            f"[{host}:1] tail 1", "[nodeb:2] rank 2 on node 1", "[nodeb:2] tail 2",
                            "[nodeb:3] rank 3 on node 1", "[nodeb:3] tail 3"])
    assert o1 == ""  # an agent's ranks print on the launcher, not twice


def test_an_agent_can_read_the_secret_from_standard_input(sgpu, rdzv):
    # What an ssh backend can do: no environment to forward, no file to copy.
    endpoint, secret = rdzv
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 1, "--no-python", "true")
    env = dict(sgpu.env)
    env.pop("SGPU_RDZV_SECRET", None)
    a1 = sgpu.popen("agent", "--rdzv", endpoint, "--rdzv-secret-file", "-", env=env, stdin=subprocess.PIPE)
    _, e1 = a1.communicate(input=secret.read_text(), timeout=60)
    _, e0 = n0.communicate(timeout=60)
    assert a1.returncode == 0 and n0.returncode == 0, (e0, e1)


def final_loss(text):
    m = re.findall(r"final loss (\d+\.\d+)", text)
    assert m, text
    return m[-1]


def test_ddp_on_two_nodes_of_two_ranks_matches_one_node_of_four(sgpu, rdzv, tmp_path):
    endpoint, secret = rdzv
    script = str(ROOT / "examples" / "ddp_mlp.py")
    short = ["--epochs", 1, "--samples", 512]
    one = sgpu.run("launch", "--nproc", 4, script, *short, timeout=300)
    assert one.returncode == 0, one.stderr
    # Node 1 keeps its run directory elsewhere: its results must travel to the launcher's.
    env1 = dict(sgpu.env, SGPU_HOME=str(tmp_path / "node1-home"))
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 2, script, *short)
    n1 = static_node(sgpu, 2, 1, endpoint, secret, "--nproc", 2, script, *short, env=env1)
    o0, e0 = n0.communicate(timeout=300)
    _, e1 = n1.communicate(timeout=300)
    assert n0.returncode == 0 and n1.returncode == 0, (e0, e1)
    assert final_loss(o0) == final_loss(one.stdout)
    runs = list((tmp_path / "sgpu-home" / "runs").iterdir())
    run_dir = next(r for r in runs if (r / "ranks" / "3").exists())
    results = [json.loads((run_dir / "ranks" / str(r) / "result").read_text()) for r in range(4)]
    assert [x["rank"] for x in results] == [0, 1, 2, 3]
    assert [f"{x['final_loss']:.6f}" for x in results] == [final_loss(o0)] * 4


def test_the_first_failure_on_any_node_stops_every_node(sgpu, rdzv, out):
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out))
    script = WRITE_PID + 'if [ "$RANK" = 3 ]; then sleep 1; exit 7; fi; exec sleep 60'
    t0 = time.monotonic()
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 2, "--no-python", "sh", "-c", script, env=env)
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", env=env)
    pids = read_pids(out, range(4))
    _, e0 = n0.communicate(timeout=60)
    _, e1 = a1.communicate(timeout=60)
    assert n0.returncode == 7, e0
    assert a1.returncode == 7, e1
    assert_one_exit_code(7, home=sgpu.env)
    assert "rank 3 (nodeb) failed first: exit 7; 3 other ranks stopped by sgpu (exit code 7)" in e0
    assert time.monotonic() - t0 < 10
    assert all_dead(pids)


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_to_the_launcher_reach_every_node(sgpu, rdzv, out, sig, code):
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out), MODE="exit")
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 2, "--python", TORCH_PYTHON,
                     python_program("signals.py"), env=env)
    a1 = agent(sgpu, endpoint, secret, env=env)
    wait_for(lambda: len(list(out.glob("ready-*"))) == 4, what="4 ready ranks")
    n0.send_signal(sig)
    _, e0 = n0.communicate(timeout=30)
    _, e1 = a1.communicate(timeout=30)
    assert n0.returncode == code, e0
    assert a1.returncode == code, e1
    for r in range(4):
        assert (out / f"sig-{r}.txt").read_text().split() == [signal.Signals(sig).name]


def test_a_sigterm_to_the_launcher_lets_every_rank_of_two_static_nodes_checkpoint(sgpu, rdzv, out):
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out), CKPT_SECONDS="1")
    args = ["--nproc", 2, "--grace", "20s", "--python", TORCH_PYTHON, python_program("checkpoint.py")]
    n0 = static_node(sgpu, 2, 0, endpoint, secret, *args, env=env)
    n1 = static_node(sgpu, 2, 1, endpoint, secret, *args, env=env)
    wait_for(lambda: len(list(out.glob("ready-*"))) == 4, what="4 ready ranks")
    sent = time.time()
    n0.send_signal(signal.SIGTERM)
    _, e0 = n0.communicate(timeout=60)
    _, e1 = n1.communicate(timeout=60)
    assert n0.returncode == 143 and n1.returncode == 143, e0 + e1
    summary = newest_summary(sgpu.env)
    assert summary["status"] == "preempted", summary["root_cause"]
    arrived = []
    for r in range(4):
        got = (out / f"events-{r}").read_text().split()
        assert got[0] == "SIGTERM" and got[2] == "checkpointed", got
        arrived.append(float(got[1]) - sent)
        assert summary["ranks"][r]["signal"] is None, summary["ranks"][r]  # no SIGKILL
    spread = max(arrived) - min(arrived)
    print(f"SIGTERM to the launcher -> ranks on 2 nodes: first {min(arrived) * 1000:.1f} ms, "
          f"last {max(arrived) * 1000:.1f} ms, spread {spread * 1000:.1f} ms")
    assert spread < 1.0


def test_every_rank_of_every_node_knows_the_launcher_s_deadline(sgpu, rdzv, out):
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out))
    script = 'echo "$SGPU_DEADLINE" > "$OUT_DIR/deadline-$RANK"'
    t0 = time.time()
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 2, "--timeout", "1h", "--no-python", "sh", "-c", script,
                     env=env)
    n1 = static_node(sgpu, 2, 1, endpoint, secret, "--nproc", 2, "--timeout", "5m", "--no-python", "sh", "-c", script,
                     env=env)
    assert n0.wait(timeout=60) == 0 and n1.wait(timeout=60) == 0
    values = {int((out / f"deadline-{r}").read_text()) for r in range(4)}
    assert len(values) <= 2 and max(values) - min(values) <= 1, values  # whole seconds, one time
    assert abs(min(values) - (t0 + 3600)) < 10  # node 0's --timeout is the run's


def test_a_signal_to_an_agent_stops_the_whole_job_and_names_its_node(sgpu, rdzv, out):
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out))
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 1, "--no-python", "sh", "-c", WRITE_PID + "exec sleep 60",
                     env=env)
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", env=env)
    pids = read_pids(out, range(2))
    a1.send_signal(signal.SIGTERM)  # what scancel or an ssh hangup does
    _, e0 = n0.communicate(timeout=30)
    a1.communicate(timeout=30)
    assert n0.returncode == 143, e0
    assert_one_exit_code(143, home=sgpu.env)
    # A SIGTERM no `sgpu cancel` sent is the system's: a preemption (README "Stopping well").
    assert "preempted: sgpu received SIGTERM on nodeb" in e0
    assert all_dead(pids)


def test_an_agent_signalled_again_once_its_ranks_ended_exits_with_the_launchers_code(sgpu, rdzv, out):
    # SLURM signals a step's tasks SIGTERM, SIGCONT, SIGTERM: the second can
    # come once the agent's ranks have ended, while it waits for the launcher's
    # verdict (here node 0's rank takes 3 s to stop). It must not end the
    # agent with another code than the launcher's.
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out))
    slow_stop = WRITE_PID + """[ "$RANK" = 1 ] && exec sleep 60; trap 'kill $c; sleep 3; exit 0' TERM; sleep 60 & c=$!; wait"""
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 1, "--no-python", "sh", "-c", slow_stop, env=env)
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", env=env)
    pids = read_pids(out, range(2))
    a1.send_signal(signal.SIGTERM)
    assert all_dead([pids[1]], timeout=2)
    time.sleep(0.5)  # the agent's ranks are reaped; it waits for the verdict
    a1.send_signal(signal.SIGTERM)
    _, e0 = n0.communicate(timeout=30)
    _, e1 = a1.communicate(timeout=30)
    assert n0.returncode == 143, e0
    assert a1.returncode == 143, e1
    assert_one_exit_code(143, home=sgpu.env)


def test_the_timeout_reaches_every_node(sgpu, rdzv):
    endpoint, secret = rdzv
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--timeout", "2s", "--nproc", 1, "--no-python", "sleep", "60")
    a1 = agent(sgpu, endpoint, secret)
    _, e0 = n0.communicate(timeout=30)
    a1.communicate(timeout=30)
    assert n0.returncode == 124, e0
    assert a1.returncode == 124
    assert_one_exit_code(124, home=sgpu.env)
    assert "timed out after 2s" in e0


def test_a_killed_agent_is_detected_at_once_and_named(sgpu, rdzv, out):
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out))
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 2, "--no-python", "sh", "-c", WRITE_PID + "exec sleep 60",
                     env=env)
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", env=env)
    pids = read_pids(out, range(4))
    t0 = time.monotonic()
    a1.kill()
    _, e0 = n0.communicate(timeout=30)
    assert n0.returncode == 1, e0
    assert_one_exit_code(1, home=sgpu.env)
    assert newest_summary(sgpu.env)["status"] == "node_lost"
    assert "node nodeb was lost" in e0
    assert time.monotonic() - t0 < 2
    assert all_dead(pids)


def test_a_silent_agent_is_detected_within_the_heartbeat_timeout(sgpu, rdzv, out):
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out))
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 1, "--grace", "1s", "--no-python", "sh", "-c",
                     WRITE_PID + "exec sleep 60", env=env)
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", env=env)
    pids = read_pids(out, range(2))
    t0 = time.monotonic()
    a1.send_signal(signal.SIGSTOP)  # alive but silent, as on a hung machine
    _, e0 = n0.communicate(timeout=30)
    elapsed = time.monotonic() - t0
    assert n0.returncode == 1, e0
    assert "node nodeb was lost: no message for 2s (--heartbeat-timeout)" in e0
    assert 1.5 < elapsed < 5
    # Woken up, the agent finds its launcher gone, stops its rank and ends.
    a1.send_signal(signal.SIGCONT)
    _, e1 = a1.communicate(timeout=30)
    assert a1.returncode != 0
    assert "lost the launcher" in e1
    assert all_dead(pids)


def test_an_agent_that_loses_the_launcher_stops_its_ranks(sgpu, rdzv, out):
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out))
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 1, "--grace", "1s", "--no-python", "sh", "-c",
                     WRITE_PID + "exec sleep 60", env=env)
    a1 = agent(sgpu, endpoint, secret, env=env)
    pids = read_pids(out, range(2))
    n0.kill()
    n0.wait()
    _, e1 = a1.communicate(timeout=30)
    assert a1.returncode == 1, e1
    assert "sgpu: error: lost the launcher at 127.0.0.1:" in e1
    assert all_dead(pids)


def test_an_agent_watching_stdin_stops_its_ranks_when_its_session_ends(sgpu, rdzv, out):
    # --watch-stdin (the ssh backend's agents): stdin is the ssh session; its
    # end is the launcher's way to end the agent, and a dropped session's sign.
    endpoint, secret = rdzv
    env = dict(sgpu.env, OUT_DIR=str(out))
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 1, "--grace", "1s", "--no-python", "sh", "-c",
                     WRITE_PID + "exec sleep 60", env=env)
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", "--watch-stdin", env=env, stdin=subprocess.PIPE)
    pids = read_pids(out, range(2))
    _, e1 = a1.communicate(timeout=30)  # closes its stdin
    assert a1.returncode == 129, e1
    assert "the launcher's ssh session ended" in e1
    assert all_dead(pids[1:])
    _, e0 = n0.communicate(timeout=30)
    assert n0.returncode != 0 and "nodeb" in e0, e0
    assert all_dead(pids)


def test_the_join_timeout_names_the_missing_nodes(sgpu, rdzv):
    endpoint, secret = rdzv
    n0 = static_node(sgpu, 3, 0, endpoint, secret, "--join-timeout", "1s", "--nproc", 1, "--no-python", "true")
    _, e0 = n0.communicate(timeout=30)
    assert n0.returncode == 1, e0
    assert re.search(r"the rendezvous timed out after 1s \(--join-timeout\): 1 of 3 nodes joined \(\S+ as node rank 0\); "
                     r"missing: node rank 1, node rank 2", e0), e0


def test_two_nodes_claiming_one_rank_is_an_error_on_every_node(sgpu, rdzv):
    endpoint, secret = rdzv
    prog = ["--nproc", 1, "--no-python", "true"]
    n0 = static_node(sgpu, 3, 0, endpoint, secret, *prog)
    n1 = static_node(sgpu, 3, 1, endpoint, secret, *prog)
    n1b = static_node(sgpu, 3, 1, endpoint, secret, *prog)
    results = [p.communicate(timeout=60) + (p.returncode,) for p in (n0, n1, n1b)]
    for _, err, code in results:
        assert code == 2, err
        assert "node rank 1 is claimed by both" in err


def test_a_node_that_cannot_run_its_part_stops_the_rendezvous(sgpu, rdzv, tmp_path):
    endpoint, secret = rdzv
    bindir = tmp_path / "bin"
    bindir.mkdir()
    prog = bindir / "only-on-node0"
    prog.write_text("#!/bin/sh\necho hi\n")
    prog.chmod(0o755)
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 1, "--no-python", "only-on-node0",
                     env=dict(sgpu.env, PATH=f"{bindir}:{sgpu.env['PATH']}"))
    # The agent takes the launcher's job but finds no such program on its node's PATH.
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb")
    _, e0 = n0.communicate(timeout=30)
    _, e1 = a1.communicate(timeout=30)
    for code, err in ((n0.returncode, e0), (a1.returncode, e1)):
        assert code == 127, err
        assert re.search(r"node nodeb: .*only-on-node0.*not found", err), err


@pytest.mark.parametrize("args,message", [
    (["--nnodes", 2], "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes", 2, "--rdzv-endpoint", "127.0.0.1:29400"], "--nnodes 2 needs --node-rank K (0 to 1)"),
    (["--nnodes", 2, "--rdzv-endpoint", "127.0.0.1:29400", "--node-rank", 2], "--node-rank 2: must be below the number of nodes, 2 (--nnodes)"),
    (["--nnodes", "1:4"], "--nnodes 1:4: elastic node ranges are not supported"),
    (["--nnodes", "x"], "--nnodes x: expected a number of nodes"),
    (["--nnodes", 2, "--rdzv-endpoint", "nohost", "--node-rank", 0], "--rdzv-endpoint nohost: no port"),
    (["--rdzv-endpoint", "127.0.0.1:29400"], "--rdzv-endpoint 127.0.0.1:29400: the rendezvous is for multi-node runs"),
    (["--nnodes", 2, "--rdzv-endpoint", "127.0.0.1:29400", "--node-rank", 0, "--join-timeout", "none"],
     "--join-timeout none: give a limit"),
    (["--nnodes", 2, "--rdzv-endpoint", "127.0.0.1:29400", "--node-rank", 0],
     "a multi-node run needs the rendezvous secret shared by every node"),
])
def test_bad_multinode_flags_are_clear_errors(sgpu, args, message):
    res = sgpu.run("launch", *args, "--nproc", 1, "--no-python", "true")
    assert res.returncode == 2, res.stderr
    assert message in res.stderr


def test_a_secret_file_others_can_read_is_refused(sgpu, rdzv):
    endpoint, secret = rdzv
    secret.chmod(0o644)
    res = sgpu.run("launch", "--nnodes", 2, "--node-rank", 0, "--rdzv-endpoint", endpoint, "--rdzv-secret-file", secret,
                   "--nproc", 1, "--no-python", "true")
    assert res.returncode == 2
    assert f"--rdzv-secret-file {secret}: others can read it (mode 0644); run: chmod 600 {secret}" in res.stderr


def test_the_network_check_is_in_the_events_and_its_cost_in_the_status_line(sgpu, rdzv, tmp_path):
    endpoint, secret = rdzv
    # Node 0 on a terminal (util-linux script), so that it draws its status line.
    n0_args = ["launch", "--nnodes", 2, "--node-rank", 0, "--rdzv-endpoint", endpoint, "--rdzv-secret-file", secret,
               "--nproc", 1, "--timeout", "1h", "--no-python", "sleep", "2.5"]
    line = " ".join(f"'{a}'" for a in [sgpu.bin, *map(str, n0_args)])
    n0 = subprocess.Popen(["script", "-qefc", f"stty cols 200; {line}", "/dev/null"], env=sgpu.env, cwd=sgpu.cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    n1 = agent(sgpu, endpoint, secret, "--node-name", "second")
    text, _ = n0.communicate(timeout=60)
    n1.communicate(timeout=60)
    assert n0.returncode == 0, text
    text = text.decode(errors="replace")
    drawn = re.findall(r"\r\x1b\[K([^\n\r\x1b]*)(?=\r\x1b\[K)", text)
    checked = [s for s in drawn if "network checked in" in s]
    assert checked, drawn
    cost = float(re.search(r"\| network checked in (\d+\.\d)ms$", checked[0]).group(1))
    assert cost < 50, checked  # loopback: the bound for a healthy job
    summary = newest_summary(sgpu.env)
    events = [json.loads(ln) for ln in (pathlib.Path(summary["run_dir"]) / "events.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert kinds.index("run_started") < kinds.index("network_checked") < kinds.index("rank_started"), kinds
    net = events[kinds.index("network_checked")]
    assert net["routes"] == summary["spec"]["routes"]
    assert [r["interface"] for r in net["routes"]] == ["lo", "lo"], net
    assert net["master_addr"] == summary["spec"]["master_addr"] == "127.0.0.1"
    assert net["slowest_ms"] == max(r["connect_ms"] for r in net["routes"])


def test_explain_network_on_one_node_is_a_usage_error_that_says_why(sgpu):
    res = sgpu.run("launch", "--explain-network", "--nproc", 2)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == (
        "sgpu: error: --explain-network: this job runs on one node, where the ranks meet over loopback "
        "(MASTER_ADDR 127.0.0.1) and nothing crosses a network; it explains jobs of several nodes (--nnodes, "
        "--hosts, SLURM)"), res.stderr
