"""Named runs (--name) and idempotent launches (--idempotency-key), against
the real binary and real ranks: what a CI retry sees when the run it asks
for is already running, has succeeded, has failed, or was other work."""
import fcntl
import json
import os
import re
import subprocess

import pytest

from conftest import RUN_ID, python_program
from mlflow_server import MlflowServer, venv_python
from multinode import wait_for



pytestmark = pytest.mark.usefixtures("cancel_detached_runs")


def runs(sgpu):
    res = sgpu.run("runs", "--all", "-o", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def lines(path):
    return path.read_text().splitlines() if path.exists() else []


def counting_job(tmp_path, code=0, wait=False):
    """A rank that counts its starts in a file (the test's own record, not
    sgpu's), says hello, waits for `go` when asked, and exits with `code`."""
    starts, go = tmp_path / "starts", tmp_path / "go"
    script = f'echo "$RANK" >> {starts}; echo "hello $RANK"; '
    if wait:
        script += f"while [ ! -e {go} ]; do sleep 0.02; done; "
    script += f'echo "bye $RANK"; exit {code}'
    return starts, go, ["--no-python", "sh", "-c", script]


def test_ten_concurrent_detached_launches_with_one_key_start_one_run(sgpu, tmp_path):
    starts, go, job = counting_job(tmp_path, wait=True)
    launches = [sgpu.popen("launch", "--detach", "--idempotency-key", "ci-42", *job) for _ in range(10)]
    results = [p.communicate(timeout=60) for p in launches]
    for p, (out, err) in zip(launches, results):
        assert p.returncode == 0, err
    ids = {out.strip() for out, _ in results}
    assert len(ids) == 1 and RUN_ID.fullmatch(ids.pop()), results
    assert sum("no new run started" in err for _, err in results) == 9
    listed = runs(sgpu)
    assert len(listed) == 1 and listed[0]["idempotency_key"] == "ci-42"
    wait_for(lambda: lines(starts), 20, "the rank's start")
    go.touch()
    res = sgpu.run("wait", listed[0]["run_id"])
    assert res.returncode == 0, res.stderr
    assert lines(starts) == ["0"]  # one rank, started once


def test_a_launch_waits_while_another_holds_the_keys_lock(sgpu, tmp_path):
    """The lock is the runs directory's flock on .keys/<FNV-1a of the key>: held here, as a launch holds it."""
    h = 14695981039346656037
    for b in b"held":
        h = ((h ^ b) * 1099511628211) % 2**64
    keys = tmp_path / "sgpu-home" / "runs" / ".keys"
    keys.mkdir(parents=True)
    with open(keys / f"{h:016x}", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        p = sgpu.popen("launch", "--idempotency-key", "held", "--no-python", "true")
        assert "another launch with this key is starting its run; waiting for it" in p.stderr.readline()
        assert p.poll() is None and runs(sgpu) == []  # nothing looked up, nothing started
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert len(runs(sgpu)) == 1


def test_an_attached_launch_follows_the_running_run_with_its_key_and_exits_with_its_code(sgpu, tmp_path):
    starts, go, job = counting_job(tmp_path, code=7, wait=True)
    first = sgpu.run("launch", "--detach", "--nproc", 2, "--idempotency-key", "step-1", *job)
    assert first.returncode == 0, first.stderr
    run_id = first.stdout.strip()
    wait_for(lambda: len(lines(starts)) == 2, 20, "both ranks' starts")
    retry = sgpu.popen("launch", "--nproc", 2, "--idempotency-key", "step-1", *job)
    seen = {retry.stdout.readline().strip() for _ in range(2)}  # the run's output so far, while it runs
    assert seen == {"[0] hello 0", "[1] hello 1"}
    go.touch()
    out, err = retry.communicate(timeout=60)
    assert retry.returncode == 7, err
    # What it printed once the follow began (fail-fast may stop the other rank before its line).
    assert re.search(r"^\[[01]\] bye [01]$", out, re.M), out
    assert f"run {run_id} is running; following it" in err
    assert f"sgpu: run {run_id} failed (exit code 7)" in err
    assert sorted(lines(starts)) == ["0", "1"]  # no second set of ranks ever started
    assert [r["run_id"] for r in runs(sgpu)] == [run_id]


def test_a_json_follow_keeps_stdout_for_the_reused_runs_summary(sgpu, tmp_path):
    starts, go, job = counting_job(tmp_path, code=7, wait=True)
    first = sgpu.run("launch", "--detach", "--name", "step", "--idempotency-key", "step-2", *job)
    assert first.returncode == 0, first.stderr
    wait_for(lambda: lines(starts), 20, "the rank's start")
    retry = sgpu.popen("launch", "-o", "json", "--idempotency-key", "step-2", *job)
    assert "following it" in retry.stderr.readline()
    go.touch()
    out, err = retry.communicate(timeout=60)
    assert retry.returncode == 7, err
    doc = json.loads(out)  # the run's summary alone; its lines went to stderr
    assert (doc["reused"], doc["run_id"], doc["exit_code"], doc["name"]) == (True, first.stdout.strip(), 7, "step")
    assert "[0] bye 0" in err and lines(starts) == ["0"]


def test_after_success_nothing_starts_and_after_failure_a_new_run_does(sgpu, tmp_path):
    starts, _, job = counting_job(tmp_path)
    first = sgpu.run("launch", "-o", "json", "--idempotency-key", "ok-1", *job)
    assert first.returncode == 0, first.stderr
    done = json.loads(first.stdout)
    assert "reused" not in done
    again = sgpu.run("launch", "-o", "json", "--idempotency-key", "ok-1", *job)
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert doc["reused"] is True and doc["run_id"] == done["run_id"] and doc["exit_code"] == 0
    # The key from the environment, as a CI system passes its step's id.
    text = sgpu.run("launch", *job, env=dict(sgpu.env, SGPU_IDEMPOTENCY_KEY="ok-1"))
    assert text.returncode == 0, text.stderr
    assert f"run {done['run_id']} already succeeded (exit code 0); nothing started" in text.stderr
    detached = sgpu.run("launch", "--detach", "--idempotency-key", "ok-1", *job)
    assert (detached.returncode, detached.stdout.strip()) == (0, done["run_id"]), detached.stderr
    assert lines(starts) == ["0"] and len(runs(sgpu)) == 1

    starts.unlink()
    _, _, failing = counting_job(tmp_path, code=3)
    failed = [sgpu.run("launch", "-o", "json", "--idempotency-key", "bad-1", *failing) for _ in range(2)]
    assert [r.returncode for r in failed] == [3, 3]
    ids = [json.loads(r.stdout)["run_id"] for r in failed]
    assert ids[0] != ids[1] and lines(starts) == ["0", "0"]  # the retry ran again


def test_the_same_key_with_other_work_is_refused_unless_force_new(sgpu, tmp_path):
    first = sgpu.run("launch", "--nproc", 1, "--idempotency-key", "k", "--no-python", "true")
    assert first.returncode == 0, first.stderr
    other = sgpu.run("launch", "--nproc", 1, "--idempotency-key", "k", "--no-python", "sh", "-c", "exit 0")
    assert other.returncode == 2
    assert "ran other work" in other.stderr
    assert "entrypoint: --no-python true before, --no-python sh now" in other.stderr
    assert "arguments: (none) before, -c 'exit 0' now" in other.stderr
    more = sgpu.run("launch", "--nproc", 2, "--idempotency-key", "k", "--no-python", "true")
    assert more.returncode == 2 and "resources.nproc: 1 before, 2 now" in more.stderr, more.stderr
    assert len(runs(sgpu)) == 1  # nothing started
    forced = sgpu.run("launch", "-o", "json", "--nproc", 1, "--idempotency-key", "k", "--force-new",
                      "--no-python", "sh", "-c", "exit 0")
    assert forced.returncode == 0, forced.stderr
    assert [r["run_id"] for r in runs(sgpu)][0] == json.loads(forced.stdout)["run_id"]
    assert len(runs(sgpu)) == 2


def test_a_name_finds_the_newest_run_of_it_in_runs_status_logs_and_cancel(sgpu, tmp_path):
    first = sgpu.run("launch", "-o", "json", "--name", "nightly", "--no-python", "echo", "one")
    assert first.returncode == 0, first.stderr
    done = json.loads(first.stdout)
    assert done["name"] == "nightly"
    summary = json.loads(open(os.path.join(done["run_dir"], "summary.json")).read())
    assert summary["name"] == "nightly" and summary["spec"]["name"] == "nightly"
    with open(os.path.join(done["run_dir"], "events.jsonl")) as f:
        assert json.loads(f.readline())["name"] == "nightly"
    started = tmp_path / "started"
    second = sgpu.run("launch", "--detach", "-o", "json", "--name", "nightly", "--no-python", "sh", "-c",
                      f"echo two; touch {started}; exec sleep 60")
    assert second.returncode == 0, second.stderr
    running = json.loads(second.stdout)
    assert running["name"] == "nightly"
    wait_for(started.exists, 20, "the rank's start")

    listed = runs(sgpu)
    assert [(r["run_id"], r["name"]) for r in listed] == [(running["run_id"], "nightly"), (done["run_id"], "nightly")]
    table = sgpu.run("runs").stdout.splitlines()
    assert "NAME" in table[0].split() and all("nightly" in row.split() for row in table[1:])
    status = sgpu.run("status", "nightly", "-o", "json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["run_id"] == running["run_id"]
    assert "name:       nightly" in sgpu.run("status", "nightly").stdout
    logs = sgpu.run("logs", "nightly")
    assert (logs.returncode, logs.stdout) == (0, "[0] two\n"), logs.stderr
    cancel = sgpu.run("cancel", "nightly", "-o", "json")
    assert cancel.returncode == 0, cancel.stderr
    assert json.loads(cancel.stdout)["state"] == "cancelled"
    # An id still resolves as one; an unknown name says what a RUN can be.
    assert json.loads(sgpu.run("status", done["run_id"], "-o", "json").stdout)["name"] == "nightly"
    unknown = sgpu.run("status", "weekly")
    assert unknown.returncode == 2 and "no run named 'weekly'" in unknown.stderr


@pytest.mark.parametrize("flag,value,problem", [
    ("--name", "2026-run", "the name starts with '2'"),
    ("--name", "last", "'last' already means the newest run"),
    ("--name", "a b", "character 2 (byte 0x20) is not allowed"),
    ("--name", "x" * 65, "the name is 65 characters long"),
    ("--idempotency-key", "a key", "character 2 (byte 0x20) is not allowed"),
    ("--idempotency-key", "k" * 129, "the key is 129 characters long"),
])
def test_names_and_keys_are_checked_before_anything_starts(sgpu, flag, value, problem):
    res = sgpu.run("launch", flag, value, "--no-python", "true")
    assert res.returncode == 2
    assert f"sgpu: error: {flag} {value}: {problem}" in res.stderr
    assert runs(sgpu) == []


def test_the_name_is_the_default_mlflow_run_name(sgpu, tmp_path):
    def query(env, *args):
        out = subprocess.run([venv_python(), python_program("mlflow_query.py"), *args], env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    with MlflowServer(tmp_path / "mlflow", auth=True) as server:
        sgpu.env.update(server.client_env())
        res = sgpu.run("launch", "-o", "json", "--name", "bert-nightly", "--no-python", "true")
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        run = query(sgpu.env, "run", doc["mlflow"]["run_id"])
        assert run["run_name"] == "bert-nightly"
        assert run["tags"]["sgpu.run_id"] == doc["run_id"]
        named = sgpu.run("launch", "-o", "json", "--name", "bert-nightly", "--mlflow-run-name", "explicit",
                         "--no-python", "true")
        assert named.returncode == 0, named.stderr
        assert query(sgpu.env, "run", json.loads(named.stdout)["mlflow"]["run_id"])["run_name"] == "explicit"


def test_force_new_without_a_key_says_it_needs_one(sgpu):
    res = sgpu.run("launch", "--force-new", "--no-python", "true")
    assert res.returncode == 2 and "--force-new only applies with --idempotency-key" in res.stderr
    assert runs(sgpu) == []
