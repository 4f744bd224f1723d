"""--max-restarts, on one node and on several: the whole group starts again
after a rank fails, with TORCHELASTIC_RESTART_COUNT=k and a new MASTER_PORT,
within one --timeout; each attempt's files are kept and summary.json lists
every attempt. A lost node is never restarted."""
import json
import pathlib
import re
import signal
import time

from conftest import ROOT, TORCH_PYTHON, assert_one_exit_code, newest_summary, pid_alive, python_program
from multinode import agent, all_dead, free_port, make_secret_file, read_pids, static_node


def restart_env(sgpu, tmp_path, **extra):
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    return out, dict(sgpu.env, OUT_DIR=str(out), **{k: str(v) for k, v in extra.items()})


def seen(out, rank, attempt):
    count, max_restarts, port = (out / f"seen-{rank}-{attempt}.txt").read_text().split()
    return int(count), int(max_restarts), int(port)


def events(summary):
    lines = pathlib.Path(summary["run_dir"], "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_fails_once_then_succeeds(sgpu, tmp_path):
    out, env = restart_env(sgpu, tmp_path, FAIL_UNTIL=1)
    res = sgpu.run("launch", "--nproc", 2, "--max-restarts", 2, "--restart-backoff", "100ms",
                   python_program("restart_job.py"), env=env)
    assert res.returncode == 0, res.stderr
    assert_one_exit_code(0, home=env)
    # Every rank saw both attempts, each with its own MASTER_PORT.
    for r in range(2):
        assert [seen(out, r, k)[:2] for k in (0, 1)] == [(0, 2), (1, 2)]
    assert seen(out, 0, 0)[2] != seen(out, 0, 1)[2]
    assert not (out / "seen-0-2.txt").exists()
    # One console line for the restart: the attempt, its cause, the wait.
    assert "sgpu: attempt 0 ended: rank 0 failed first: exit 3 (exit code 3); restart 1 of 2 in 100ms" in res.stderr
    summary = newest_summary(env)
    attempts = summary["attempts"]
    assert [(a["attempt"], a["status"], a["exit_code"]) for a in attempts] == [(0, "rank_failed", 3),
                                                                             (1, "completed", 0)]
    assert attempts[0]["root_cause"]["rank"] == 0 and "boom on attempt 0" in attempts[0]["root_cause"]["details"]
    assert attempts[1]["root_cause"] is None
    # Each attempt's logs kept; the newest where tools look.
    ranks = pathlib.Path(summary["run_dir"], "ranks")
    assert "boom on attempt 0" in (ranks / "0" / "attempt-0" / "stderr").read_text()
    assert (ranks / "1" / "attempt-0" / "stdout").read_text() == "rank 1 attempt 0\n"
    assert (ranks / "0" / "stdout").read_text() == "rank 0 attempt 1\n"
    assert (ranks / "0" / "attempt-1" / "stdout").read_text() == "rank 0 attempt 1\n"
    assert (ranks / "0" / "stderr").read_text() == ""
    started = [(e["rank"], e["attempt"]) for e in events(summary) if e["event"] == "rank_started"]
    assert sorted(started) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    restarts = [e for e in events(summary) if e["event"] == "restart"]
    assert restarts == [dict(restarts[0], attempt=1, after="rank_failed", exit_code=3, rank=0, backoff_s=0.1)]


def test_always_failing_ends_with_the_root_cause_after_every_attempt(sgpu, tmp_path):
    out, env = restart_env(sgpu, tmp_path, FAIL_CODE=7, FAIL_RANK=1)
    t0 = time.monotonic()
    res = sgpu.run("launch", "--nproc", 2, "--max_restarts=2", "--restart-backoff", "200ms",
                   python_program("restart_job.py"), env=env)
    elapsed = time.monotonic() - t0
    assert res.returncode == 7, res.stderr
    assert_one_exit_code(7, home=env)
    assert sorted(p.name for p in out.glob("seen-1-*")) == ["seen-1-0.txt", "seen-1-1.txt", "seen-1-2.txt"]
    assert elapsed >= 0.6  # 200ms, then 400ms between the three attempts
    summary = newest_summary(env)
    assert [a["exit_code"] for a in summary["attempts"]] == [7, 7, 7]
    assert summary["root_cause"]["rank"] == 1 and summary["root_cause"]["exit_code"] == 7
    backoffs = [e["backoff_s"] for e in events(summary) if e["event"] == "restart"]
    assert backoffs == [0.2, 0.4]
    assert "restart 2 of 2 in 400ms" in res.stderr and "3 attempts (2 restarts)" in res.stderr


def test_a_missing_program_is_not_restarted(sgpu, tmp_path):
    script = tmp_path / "missing.sh"
    script.write_text("#!/bin/sh\necho run >> \"$OUT_DIR/runs\"\nexec /nonexistent/program\n")
    script.chmod(0o755)
    out, env = restart_env(sgpu, tmp_path)
    res = sgpu.run("launch", "--nproc", 1, "--max-restarts", 3, "--restart-backoff", "10ms", "--no-python", script,
                   env=env)
    assert res.returncode == 127, res.stderr
    assert (out / "runs").read_text() == "run\n"
    assert len(newest_summary(env)["attempts"]) == 1


def test_timeout_covers_every_attempt(sgpu, tmp_path):
    out, env = restart_env(sgpu, tmp_path)
    t0 = time.monotonic()
    res = sgpu.run("launch", "--nproc", 2, "--max-restarts", 100, "--restart-backoff", "300ms", "--timeout", "2s",
                   python_program("restart_job.py"), env=env)
    elapsed = time.monotonic() - t0
    assert res.returncode == 124, res.stderr
    assert_one_exit_code(124, home=env)
    assert elapsed < 3.5
    assert len(list(out.glob("seen-0-*"))) >= 2  # it did restart before the time ran out


def test_ctrl_c_during_the_backoff_ends_at_once(sgpu, tmp_path):
    out, env = restart_env(sgpu, tmp_path)
    p = sgpu.popen("launch", "--nproc", 2, "--max-restarts", 3, "--restart-backoff", "60s",
                   python_program("restart_job.py"), env=env)
    for line in p.stderr:  # sgpu says when it starts waiting
        if "restart 1 of 3 in 1m" in line:
            break
    else:
        raise AssertionError("no restart line")
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=30)
    assert time.monotonic() - t0 < 2
    assert p.returncode == 130
    assert_one_exit_code(130, home=env)
    summary = newest_summary(env)
    assert [a["status"] for a in summary["attempts"]] == ["rank_failed"]
    for r in range(2):
        assert not pid_alive(summary["ranks"][r]["pid"])


def two_static_nodes(sgpu, tmp_path, env, *args, node0=()):
    """The same launch on two static nodes of this machine, `node0` given to
    node 0 alone; each node's (exit code, stderr)."""
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    nodes = [static_node(sgpu, 2, k, endpoint, secret, *(node0 if k == 0 else ()), *args, env=env) for k in (0, 1)]
    errs = [n.communicate(timeout=120)[1] for n in nodes]
    return [(n.returncode, err) for n, err in zip(nodes, errs)]


def test_two_static_nodes_restart_together(sgpu, tmp_path):
    # Rank 2 (node 1) fails on attempt 0: the launcher stops both nodes,
    # waits the backoff and tells every node's agent to start again.
    out, env = restart_env(sgpu, tmp_path, FAIL_UNTIL=1, FAIL_RANK=2)
    (rc0, e0), (rc1, e1) = two_static_nodes(sgpu, tmp_path, env, "--nproc", 2, "--max-restarts", 2,
                                            "--restart-backoff", "100ms", python_program("restart_job.py"))
    assert (rc0, rc1) == (0, 0), e0 + e1
    # Every rank of both nodes ran attempts 0 and 1, each attempt with its own MASTER_PORT.
    for r in range(4):
        assert [seen(out, r, k)[:2] for k in (0, 1)] == [(0, 2), (1, 2)]
        assert seen(out, r, 0)[2] == seen(out, 0, 0)[2] and seen(out, r, 1)[2] == seen(out, 0, 1)[2]
    assert seen(out, 0, 0)[2] != seen(out, 0, 1)[2]
    assert not list(out.glob("seen-*-2.txt"))
    assert re.search(r"sgpu: attempt 0 ended: rank 2 \(\S+\) failed first: exit 3 \(exit code 3\); "
                     r"restart 1 of 2 in 100ms", e0), e0
    summary = newest_summary(env)
    assert [(a["attempt"], a["status"], a["exit_code"]) for a in summary["attempts"]] == [(0, "rank_failed", 3),
                                                                                        (1, "completed", 0)]
    assert summary["attempts"][0]["root_cause"]["rank"] == 2
    assert "boom on attempt 0" in summary["attempts"][0]["root_cause"]["details"]
    ranks = pathlib.Path(summary["run_dir"], "ranks")
    assert "boom on attempt 0" in (ranks / "2" / "attempt-0" / "stderr").read_text()
    assert (ranks / "3" / "attempt-0" / "stdout").read_text() == "rank 3 attempt 0\n"
    assert (ranks / "3" / "stdout").read_text() == "rank 3 attempt 1\n"
    assert (ranks / "2" / "stderr").read_text() == ""
    started = sorted((e["rank"], e["attempt"]) for e in events(summary) if e["event"] == "rank_started")
    assert started == [(r, k) for r in range(4) for k in (0, 1)]
    for r in range(4):
        assert summary["ranks"][r]["exit_code"] == 0


def test_on_several_nodes_an_always_failing_job_ends_with_its_code(sgpu, tmp_path):
    out, env = restart_env(sgpu, tmp_path, FAIL_CODE=7, FAIL_RANK=1)
    # The restarts are node 0's to decide: node 1 is not given --max-restarts.
    (rc0, e0), (rc1, e1) = two_static_nodes(sgpu, tmp_path, env, "--nproc", 1, python_program("restart_job.py"),
                                            node0=("--max-restarts", 2, "--restart-backoff", "50ms"))
    assert (rc0, rc1) == (7, 7), e0 + e1
    assert sorted(p.name for p in out.glob("seen-1-*")) == ["seen-1-0.txt", "seen-1-1.txt", "seen-1-2.txt"]
    summary = newest_summary(env)
    assert [a["exit_code"] for a in summary["attempts"]] == [7, 7, 7]
    assert "3 attempts (2 restarts)" in e0


def test_a_lost_node_is_not_restarted_and_is_named(sgpu, tmp_path):
    # Node 1's agent is killed mid-run: nothing is left there to start its
    # ranks again, so the run ends at once, naming the node, restarts or not.
    out, env = restart_env(sgpu, tmp_path)
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    script = 'echo $$ > "$OUT_DIR/pid-$RANK"; exec sleep 600'
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 1, "--max-restarts", 3, "--restart-backoff", "10ms",
                     "--no-python", "sh", "-c", script, env=env)
    n1 = agent(sgpu, endpoint, secret, "--node-name", "second", env=env)
    pids = read_pids(out, [0, 1])
    n1.kill()
    _, e0 = n0.communicate(timeout=60)
    n1.wait(timeout=30)
    assert n0.returncode == 1, e0
    assert "node second was lost" in e0 and "restart 1 of 3" not in e0
    summary = newest_summary(env)
    assert [a["status"] for a in summary["attempts"]] == ["node_lost"]
    assert all_dead(pids)


def test_checkpoint_example_resumes_where_it_failed(sgpu, tmp_path):
    script = str(ROOT / "examples" / "ddp_checkpoint.py")
    common = ["launch", "--nproc", 2, "--python", TORCH_PYTHON, "--restart-backoff", "10ms", script, "--epochs", 3]
    clean = sgpu.run(*common, "--checkpoint-dir", tmp_path / "clean", timeout=300)
    assert clean.returncode == 0, clean.stderr
    clean_loss = re.search(r"final loss (\S+)", clean.stdout).group(1)
    common[3:3] = ["--max-restarts", 1]
    res = sgpu.run(*common, "--checkpoint-dir", tmp_path / "resumed", "--fail-at-epoch", 2, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "attempt 0: starting at epoch 0" in res.stdout
    assert "attempt 1: starting at epoch 2" in res.stdout
    assert re.search(r"final loss (\S+)", res.stdout).group(1) == clean_loss
    summary = newest_summary(sgpu.env)
    assert summary["exit_code"] == 0
    assert [a["status"] for a in summary["attempts"]] == ["rank_failed", "completed"]
    assert "failing on purpose at epoch 2" in summary["attempts"][0]["root_cause"]["message"]
    assert [r["start_epoch"] for r in summary["results"]] == [2, 2]


def test_dry_run_shows_the_restarts(sgpu):
    args = ["launch", "--nproc", 1, "--max-restarts", 2, "--restart-backoff", "5s", "--dry-run"]
    res = sgpu.run(*args, python_program("restart_job.py"))
    assert res.returncode == 0, res.stderr
    assert "up to 2 after a rank fails, 5s apart at first" in res.stdout
    doc = json.loads(sgpu.run(*args, "-o", "json", python_program("restart_job.py")).stdout)
    assert doc["max_restarts"] == 2 and doc["restart_backoff_s"] == 5
