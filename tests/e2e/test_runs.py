"""Detached runs and run management: launch --detach, runs, status, logs -f,
wait, cancel, prune, against the real binary and real ranks."""
import json
import os
import re
import signal
import time

import pytest

from conftest import RUN_ID

from multinode import all_dead, wait_for



pytestmark = pytest.mark.usefixtures("cancel_detached_runs")


def detach(sgpu, *args, env=None):
    res = sgpu.run("launch", "--detach", *args, env=env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    assert RUN_ID.fullmatch(run_id), res.stdout
    return run_id


def status(sgpu, run):
    res = sgpu.run("status", run, "-o", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def wait_for_files(paths, nonempty=True):
    """The ranks' own files (pids, 'started') are the job's state, not sgpu's: bounded wait."""
    wait_for(lambda: all(p.exists() and (p.stat().st_size > 0 or not nonempty) for p in paths), 20,
             f"files {[str(p) for p in paths]}")


def test_detach_then_status_then_logs_follow_to_the_exit_code(sgpu, tmp_path):
    go = tmp_path / "go"
    script = f'echo "hello $RANK"; while [ ! -e {go} ]; do sleep 0.02; done; echo "bye $RANK" >&2; exit $((RANK * 3))'
    t0 = time.monotonic()
    run_id = detach(sgpu, "--nproc", 2, "--no-python", "sh", "-c", script)
    assert time.monotonic() - t0 < 3
    st = status(sgpu, run_id)
    assert st["state"] == "running" and st["world_size"] == 2 and st["detached"] is True
    # The supervisor lives in its own session, without a terminal.
    stat = open(f"/proc/{st['sgpu_pid']}/stat").read().rsplit(")", 1)[1].split()
    assert int(stat[3]) == st["sgpu_pid"]  # session id: it leads a new session
    assert int(stat[4]) == 0  # tty_nr: no controlling terminal
    follow = sgpu.popen("logs", "-f", run_id)
    seen = {follow.stdout.readline().strip() for _ in range(2)}  # both ranks' first lines, while it runs
    assert seen == {"[0] hello 0", "[1] hello 1"}
    assert status(sgpu, run_id)["state"] == "running"
    go.touch()
    out, err = follow.communicate(timeout=30)
    assert follow.returncode == 3, err
    assert "[1] bye 1" in err
    st = status(sgpu, run_id)
    assert (st["state"], st["exit_code"]) == ("failed", 3)
    assert [r["rank"] for r in st["ranks"]] == [0, 1]
    console = (tmp_path / "sgpu-home" / "runs" / run_id / "console.log").read_text()
    assert "[0] hello 0" in console and "rank 1 failed first: exit 3" in console
    text = sgpu.run("status", run_id)
    assert f"run {run_id}: failed (exit code 3)" in text.stdout


def test_detach_json_prints_the_run_id_and_dir(sgpu, tmp_path):
    res = sgpu.run("launch", "--detach", "-o", "json", "--no-python", "true")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert RUN_ID.fullmatch(doc["run_id"])
    assert doc["run_dir"] == str(tmp_path / "sgpu-home" / "runs" / doc["run_id"])
    assert sgpu.run("wait", doc["run_id"]).returncode == 0
    summary = json.loads((tmp_path / "sgpu-home" / "runs" / doc["run_id"] / "summary.json").read_text())
    assert summary["exit_code"] == 0


@pytest.mark.parametrize("args,code,state", [
    (["--no-python", "true"], 0, "succeeded"),
    (["--no-python", "sh", "-c", "exit 3"], 3, "failed"),
    (["--timeout", "1s", "--no-python", "sleep", "60"], 124, "timed-out"),
])
def test_wait_returns_the_runs_exit_code(sgpu, args, code, state):
    run_id = detach(sgpu, *args)
    res = sgpu.run("wait", run_id, "-o", "json", timeout=30)
    assert res.returncode == code, res.stderr
    assert json.loads(res.stdout)["state"] == state
    again = sgpu.run("wait", run_id)  # an ended run answers at once, the same
    assert again.returncode == code


def test_wait_timeout_leaves_the_run_going(sgpu):
    run_id = detach(sgpu, "--no-python", "sleep", "60")
    res = sgpu.run("wait", run_id, "--timeout", "0.2s")
    assert res.returncode == 75
    assert "still running" in res.stderr
    assert status(sgpu, run_id)["state"] == "running"
    assert sgpu.run("cancel", run_id).returncode == 0


def test_cancel_stops_every_rank_with_the_grace_and_two_at_once_are_safe(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    # Each rank needs 0.3s after SIGTERM: a second SIGTERM (kill at once) would lose its 'cleaned' file.
    script = ('trap \'sleep 0.3; echo done > "$OUT_DIR/cleaned-$RANK"; exit 0\' TERM; echo $$ > "$OUT_DIR/pid-$RANK"; '
              'while :; do sleep 0.05; done')
    run_id = detach(sgpu, "--nproc", 2, "--grace", "10s", "--no-python", "sh", "-c", script, env=env)
    wait_for_files([out / "pid-0", out / "pid-1"])
    pids = [int((out / f"pid-{r}").read_text()) for r in range(2)]
    cancels = [sgpu.popen("cancel", run_id, "-o", "json") for _ in range(2)]
    results = [c.communicate(timeout=30) for c in cancels]
    for c, (stdout, stderr) in zip(cancels, results):
        assert c.returncode == 0, stderr
        assert json.loads(stdout)["state"] == "cancelled"
    assert all_dead(pids, timeout=0)  # cancel returns once the run ended
    assert (out / "cleaned-0").exists() and (out / "cleaned-1").exists()
    st = status(sgpu, run_id)
    assert (st["state"], st["exit_code"]) == ("cancelled", 143)
    again = sgpu.run("cancel", run_id)  # idempotent
    assert again.returncode == 0 and "already ended" in again.stderr


def test_kill_9_of_a_detached_supervisor_is_lost_with_no_rank_left(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    run_id = detach(sgpu, "--nproc", 2, "--no-python", "sh", "-c", 'echo $$ > "$OUT_DIR/pid-$RANK"; exec sleep 60',
                    env=env)
    wait_for_files([out / "pid-0", out / "pid-1"])
    pids = [int((out / f"pid-{r}").read_text()) for r in range(2)]
    os.kill(status(sgpu, run_id)["sgpu_pid"], signal.SIGKILL)
    assert all_dead(pids)
    res = sgpu.run("wait", run_id)
    assert res.returncode == 1 and "was lost" in res.stderr
    assert status(sgpu, run_id)["state"] == "lost"
    assert sgpu.run("cancel", run_id).returncode == 0


def test_runs_json_lists_what_ran_newest_first(sgpu):
    ok = sgpu.run("launch", "-o", "json", "--nproc", 2, "--no-python", "true")
    bad = sgpu.run("launch", "-o", "json", "--no-python", "sh", "-c", "exit 5")
    ids = [json.loads(ok.stdout)["run_id"], json.loads(bad.stdout)["run_id"]]
    res = sgpu.run("runs", "-o", "json")
    assert res.returncode == 0, res.stderr
    runs = json.loads(res.stdout)
    assert [r["run_id"] for r in runs] == ids[::-1]
    assert [(r["state"], r["exit_code"], r["world_size"]) for r in runs] == [("failed", 5, 1), ("succeeded", 0, 2)]
    assert runs[1]["entrypoint"] == "true"
    text = sgpu.run("runs").stdout.splitlines()
    assert text[0].split()[:2] == ["RUN", "STATE"]
    assert text[1].split()[:2] == [ids[1], "failed"]
    assert len(json.loads(sgpu.run("runs", "--limit", 1, "-o", "json").stdout)) == 1
    # An attached run is seen from another terminal too (its rank starts after it is listed).
    started = sgpu.cwd / "started"
    p = sgpu.popen("launch", "--no-python", "sh", "-c", f"touch {started}; exec sleep 60")
    try:
        wait_for_files([started], nonempty=False)
        runs = json.loads(sgpu.run("runs", "-o", "json").stdout)
        assert len(runs) == 3
        assert runs[0]["state"] == "running" and runs[0]["detached"] is False
    finally:
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=30)
    assert json.loads(sgpu.run("runs", "-o", "json").stdout)[0]["state"] == "cancelled"


def test_prune_keeps_running_runs_and_the_newest_n(sgpu, tmp_path):
    runs_dir = tmp_path / "sgpu-home" / "runs"
    running = detach(sgpu, "--no-python", "sleep", "60")
    finished = [json.loads(sgpu.run("launch", "-o", "json", "--no-python", "true").stdout)["run_id"] for _ in range(3)]
    dry = sgpu.run("prune", "--keep", 2, "--dry-run", "-o", "json")
    assert json.loads(dry.stdout)["removed"] == finished[:1]
    assert len(list(runs_dir.iterdir())) == 4
    res = sgpu.run("prune", "--keep", 1)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in runs_dir.iterdir()) == sorted([running, finished[2]])
    assert status(sgpu, running)["state"] == "running"
    assert sgpu.run("prune", "--older-than", "1h").returncode == 0
    assert len(list(runs_dir.iterdir())) == 2  # nothing ended an hour ago
    assert sgpu.run("prune", "--keep", 0).returncode == 0
    assert [p.name for p in runs_dir.iterdir()] == [running]
    assert sgpu.run("cancel", running).returncode == 0
    assert sgpu.run("prune").returncode == 2


def test_retention_at_launch(sgpu, tmp_path):
    runs_dir = tmp_path / "sgpu-home" / "runs"
    env = dict(sgpu.env, SGPU_KEEP_RUNS="2")
    ids = [json.loads(sgpu.run("launch", "-o", "json", "--no-python", "true", env=env).stdout)["run_id"]
           for _ in range(4)]
    runs = lambda: sorted(p.name for p in runs_dir.iterdir() if not p.name.startswith("."))  # .trash is no run
    assert runs() == sorted(ids[2:])
    sgpu.run("launch", "--keep-runs", 0, "--no-python", "true")
    assert len(runs()) == 3


def test_run_names_prefix_last_and_ambiguity(sgpu):
    ids = [json.loads(sgpu.run("launch", "-o", "json", "--no-python", "true").stdout)["run_id"] for _ in range(2)]
    common = os.path.commonprefix(ids)
    res = sgpu.run("status", common)
    assert res.returncode == 2
    assert f"'{common}' matches 2 runs" in res.stderr and ids[0] in res.stderr and ids[1] in res.stderr
    assert status(sgpu, ids[0][:len(common) + 1])["run_id"] == ids[0]
    assert status(sgpu, "last")["run_id"] == ids[1]
    missing = sgpu.run("status", "1999")
    assert missing.returncode == 2 and "no run '1999'" in missing.stderr


def test_logs_selects_ranks_streams_and_tail(sgpu):
    script = 'for i in 1 2 3; do echo "out $RANK $i"; done; echo "err $RANK" >&2; printf "partial $RANK"'
    run_id = json.loads(sgpu.run("launch", "-o", "json", "--nproc", 3, "--no-python", "sh", "-c", script).stdout)["run_id"]
    every = sgpu.run("logs", run_id)
    assert every.returncode == 0
    assert every.stdout.splitlines()[:4] == ["[0] out 0 1", "[0] out 0 2", "[0] out 0 3", "[0] partial 0"]
    assert "[2] err 2" in every.stderr
    one = sgpu.run("logs", run_id, "--ranks", "1", "--tail", 2)
    assert one.stdout.splitlines() == ["[1] out 1 3", "[1] partial 1"]
    err = sgpu.run("logs", run_id, "--rank", 2, "--stderr", "-o", "json")
    assert [json.loads(line) for line in err.stdout.splitlines()] == [{"rank": 2, "stream": "stderr", "line": "err 2"}]
    bad = sgpu.run("logs", run_id, "--rank", 7)
    assert bad.returncode == 2 and "has 3 ranks" in bad.stderr


def test_detach_is_refused_where_it_is_not_available(sgpu):
    res = sgpu.run("launch", "--detach", "--backend", "ssh", "--hosts", "a", "--no-python", "true")
    assert res.returncode == 2
    assert "detached run is available on one node" in res.stderr


def test_a_multi_node_run_is_seen_whole_from_node_0(sgpu, tmp_path):
    from multinode import agent, free_port, make_secret_file, static_node
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    prog = ["--nproc", 2, "--no-python", "sh", "-c", 'echo "rank $RANK on node $NODE_RANK"']
    n0 = static_node(sgpu, 2, 0, endpoint, secret, *prog)
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", "--node-rank", 1,
               env=dict(sgpu.env, SGPU_HOME=str(tmp_path / "nodeb-home")))
    assert n0.wait(timeout=60) == 0 and a1.wait(timeout=60) == 0
    n0.communicate()
    a1.communicate()
    st = status(sgpu, "last")
    assert (st["state"], st["world_size"], st["nnodes"]) == ("succeeded", 4, 2)
    assert [r["host"] for r in st["ranks"]][2:] == ["nodeb", "nodeb"]
    logs = sgpu.run("logs", "last", "--ranks", "2-3").stdout.splitlines()
    assert logs == ["[nodeb:2] rank 2 on node 1", "[nodeb:3] rank 3 on node 1"]
