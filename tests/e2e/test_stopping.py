"""Stopping well (README "Stopping well"): a checkpoint signal before the
run's deadline, a grace a checkpoint can use, and preemption as an end of its
own. Real processes; the DataLoader case runs Debian's python3-torch."""
import json
import signal
import time

import pytest

from conftest import ROOT, TORCH_PYTHON, assert_one_exit_code, newest_summary, python_program, wait_for_files


@pytest.fixture
def out(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    return d



def events(out, rank):
    path = out / f"events-{rank}"
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def run_events(home):
    summary = newest_summary(home)
    with open(f"{summary['run_dir']}/events.jsonl") as f:
        return [json.loads(line) for line in f]


def preempt_and_check(sgpu, out, nproc, env):
    p = sgpu.popen("launch", "-o", "json", "--nproc", nproc, "--grace", "20s", "--python", TORCH_PYTHON,
                   python_program("checkpoint.py"), env=env)
    wait_for_files(out, "ready-*", nproc)
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    stdout, err = p.communicate(timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 143, err
    assert_one_exit_code(143, home=sgpu.env, stdout=stdout)
    doc = json.loads(stdout)
    assert doc["status"] == "preempted", doc["root_cause"]
    for r in range(nproc):
        assert (out / f"ckpt-{r}").exists(), f"rank {r} lost its checkpoint: {err}"
        names = [e[0] for e in events(out, r)]
        assert names == ["SIGTERM", "checkpointed"], names
        rank = doc["ranks"][r]
        assert rank["signal"] is None and rank["exit_code"] == 0, rank  # never SIGKILLed
    assert "preempted" in err
    assert "killed by signal" not in err and "exited unexpectedly" not in err
    return took, err


def test_a_sigterm_to_sgpu_lets_8_ranks_checkpoint_within_the_grace_and_ends_preempted(sgpu, out):
    env = dict(sgpu.env, OUT_DIR=str(out), CKPT_SECONDS="2")
    took, _ = preempt_and_check(sgpu, out, 8, env)
    assert 2 <= took < 15, took
    res = sgpu.run("status", "last", "-o", "json")
    assert json.loads(res.stdout)["state"] == "preempted", res.stdout
    teardown = [e for e in run_events(sgpu.env) if e["event"] == "teardown"]
    assert teardown and teardown[0]["reason"] == "preempted" and teardown[0]["signal"] == "SIGTERM"


def test_dataloader_workers_live_until_their_rank_checkpointed(sgpu, out):
    # torchrun signals a rank's whole process group, so its DataLoader workers
    # die of the SIGTERM first and the checkpoint fails; sgpu signals the rank.
    env = dict(sgpu.env, OUT_DIR=str(out), CKPT_SECONDS="1", WORKERS="2")
    preempt_and_check(sgpu, out, 4, env)


def test_signal_before_reaches_each_rank_once_before_the_timeout(sgpu, out):
    env = dict(sgpu.env, OUT_DIR=str(out), EXIT_ON="SIGUSR2")
    t0 = time.time()
    res = sgpu.run("launch", "-o", "json", "--nproc", 4, "--timeout", "8s", "--signal-before", "USR2@5s", "--python",
                   TORCH_PYTHON, python_program("checkpoint.py"), env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    sent = doc["signal_before"]
    assert sent["signal"] == "SIGUSR2" and sent["before_s"] == 5 and sent["sent_at"], sent
    assert "SIGUSR2 to every rank: 5s before the run's deadline" in res.stderr
    assert doc["spec"]["signal_before"] == "SIGUSR2@5s"
    for r in range(4):
        got = events(out, r)
        assert [e[0] for e in got] == ["SIGUSR2"], got
        at = float(got[0][1]) - t0
        assert 3 - 1 <= at <= 3 + 1, f"rank {r} got SIGUSR2 {at:.2f}s after the launch"
    event = [e for e in run_events(sgpu.env) if e["event"] == "signal_before"]
    assert len(event) == 1 and event[0]["signal"] == "SIGUSR2", event


def test_every_rank_knows_the_deadline(sgpu, tmp_path):
    script = 'echo "$SGPU_DEADLINE"'
    t0 = time.time()
    res = sgpu.run("launch", "--nproc", 2, "--timeout", "1h", "--no-python", "sh", "-c", script)
    assert res.returncode == 0, res.stderr
    values = [int(line.split()[-1]) for line in res.stdout.splitlines()]
    assert len(values) == 2 and values[0] == values[1]
    assert abs(values[0] - (t0 + 3600)) < 5
    res = sgpu.run("launch", "--nproc", 1, "--timeout", "none", "--no-python", "sh", "-c",
                   'echo "[${SGPU_DEADLINE-unset}]"')
    assert "[unset]" in res.stdout


def test_sgpu_deadline_reads_it_in_python(sgpu, tmp_path):
    env = dict(sgpu.env, PYTHONPATH=str(ROOT / "python"))
    code = "import sgpu, time; print('left', round(sgpu.deadline() - time.time()))"
    (tmp_path / "sgpu_left.py").write_text(code + "\n")
    res = sgpu.run("launch", "--nproc", 1, "--timeout", "90s", "--python", TORCH_PYTHON, "sgpu_left.py", env=env)
    assert res.returncode == 0, res.stderr
    assert 85 <= int(res.stdout.split()[-1]) <= 90, res.stdout


def test_a_deadline_closer_than_the_warning_sends_nothing_and_says_so(sgpu, out):
    env = dict(sgpu.env, OUT_DIR=str(out))
    res = sgpu.run("launch", "--nproc", 1, "--timeout", "2s", "--signal-before", "USR2@5s", "--no-python", "true",
                   env=env)
    assert res.returncode == 0, res.stderr
    assert "--signal-before SIGUSR2@5s: the run's deadline" in res.stderr
    assert "no signal will be sent" in res.stderr


def test_stop_signal_is_what_a_stopped_rank_gets(sgpu, out):
    env = dict(sgpu.env, OUT_DIR=str(out), STOP_SIGNAL="SIGUSR1", CKPT_SECONDS="0.2")
    res = sgpu.run("launch", "--nproc", 2, "--timeout", "1s", "--stop-signal", "USR1", "--python", TORCH_PYTHON,
                   python_program("checkpoint.py"), env=env, timeout=60)
    assert res.returncode == 124, res.stderr
    for r in range(2):
        assert [e[0] for e in events(out, r)] == ["SIGUSR1", "checkpointed"]
    assert newest_summary(sgpu.env)["spec"]["stop_signal"] == "SIGUSR1"


def test_a_user_s_cancel_is_cancelled_not_preempted(sgpu, out):
    env = dict(sgpu.env, OUT_DIR=str(out), CKPT_SECONDS="0.2")
    p = sgpu.popen("launch", "--nproc", 2, "--python", TORCH_PYTHON, python_program("checkpoint.py"), env=env)
    wait_for_files(out, "ready-*", 2)
    res = sgpu.run("cancel", "last")
    p.communicate(timeout=30)
    assert p.returncode == 143
    assert newest_summary(sgpu.env)["status"] == "interrupted"
    assert json.loads(sgpu.run("status", "last", "-o", "json").stdout)["state"] == "cancelled", res.stdout


def test_ctrl_c_is_interrupted_not_preempted(sgpu, out):
    env = dict(sgpu.env, OUT_DIR=str(out), STOP_SIGNAL="SIGINT", CKPT_SECONDS="0.2")
    p = sgpu.popen("launch", "--nproc", 2, "--python", TORCH_PYTHON, python_program("checkpoint.py"), env=env)
    wait_for_files(out, "ready-*", 2)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert newest_summary(sgpu.env)["status"] == "interrupted"
    for r in range(2):
        assert [e[0] for e in events(out, r)] == ["SIGINT", "checkpointed"]


@pytest.mark.parametrize("args,message", [
    (["--signal-before", "USR2"], "--signal-before USR2: expected SIGNAL@DURATION, e.g. USR2@5m"),
    (["--signal-before", "KILL@5m"], "SIGKILL cannot be caught"),
    (["--signal-before", "USR2@soon"], "--signal-before"),
    (["--signal-before", "NOPE@5m"], "--signal-before NOPE: not a signal"),
    (["--stop-signal", "STOP"], "--stop-signal STOP: SIGSTOP cannot be caught"),
    (["--stop-signal", "TERMINATE"], "--stop-signal TERMINATE: not a signal; expected a signal name or number"),
    (["--set", "timeouts.signal_before=USR2"], "--set timeouts.signal_before USR2: expected SIGNAL@DURATION"),
])
def test_bad_stop_settings_are_clear_errors(sgpu, args, message):
    res = sgpu.run("launch", "--nproc", 1, *args, "--no-python", "true")
    assert res.returncode == 2, res.stderr
    assert message in res.stderr, res.stderr
