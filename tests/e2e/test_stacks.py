"""Hangs that name their stuck rank: --hang-timeout, the stacks at --timeout,
and `sgpu stacks` on a running job. Real gloo DDP ranks (Debian's torch), real
py-spy (PyPI, scripts/venv) and eu-stack (Debian's elfutils)."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import time

import pytest

from conftest import RUN_ID, assert_one_exit_code, newest_summary, python_program
from mlflow_server import venv_python
from multinode import free_port, make_secret_file, static_node, wait_for

HANG = python_program("hang_ddp.py")


@pytest.fixture
def stacks_env(sgpu_env):
    """py-spy where a user's job environment has it: on PATH, from the project's venv."""
    venv_bin = os.path.dirname(venv_python())
    assert os.access(os.path.join(venv_bin, "py-spy"), os.X_OK), "scripts/venv installs py-spy"
    sgpu_env["PATH"] = venv_bin + os.pathsep + sgpu_env["PATH"]
    return sgpu_env


def stacks_dirs(home):
    return sorted(pathlib.Path(home, "runs").glob("*/stacks/*"))


def test_a_hung_ddp_job_names_its_stuck_rank_and_ends_with_124(sgpu, stacks_env):
    env = dict(stacks_env, HANG_RANK="2", HANG_STEP="10", PRINT_EVERY="1")
    res = sgpu.run("launch", "--nproc", 4, "--hang-timeout", "8s", "-o", "json", HANG, env=env, timeout=180)
    assert res.returncode == 124, res.stderr
    assert_one_exit_code(res.returncode, env, res.stdout)
    doc = json.loads(res.stdout)
    assert doc["status"] == "hung"
    verdict = doc["root_cause"]["message"]
    assert verdict.startswith("no rank made progress for 8s (--hang-timeout)"), verdict
    assert re.search(r"the odd one out: rank 2 \(pid \d+\) at hang_ddp\.py:\d+ in stuck_here", verdict), verdict
    assert "the other 3 are in all_reduce" in verdict, verdict
    # The grouped report on the console: the three waiting ranks once, the stuck one named.
    assert re.search(r"ranks 0-1,3 \(3 of 4\): all_reduce .*<- step  hang_ddp\.py:\d+", res.stderr), res.stderr
    assert re.search(r"rank 2 \(1 of 4\): stuck_here  hang_ddp\.py:\d+ .*<- odd one out", res.stderr), res.stderr
    # ... and kept in the run directory.
    [kept] = stacks_dirs(env["SGPU_HOME"])
    assert {p.name for p in kept.iterdir()} == {"report.txt", "stacks.json", *(f"rank-{r}.txt" for r in range(4))}
    assert "MainThread" in (kept / "rank-2.txt").read_text()
    assert json.loads((kept / "stacks.json").read_text())["odd_ones_out"] == [2]
    status = sgpu.run("status", "last", "-o", "json", env=env)
    assert json.loads(status.stdout)["state"] == "hung"


def test_a_heartbeat_is_progress_and_a_silent_job_that_beats_is_not_hung(sgpu, stacks_env):
    # Nobody prints; rank 2 is busy for 10 s but touches $SGPU_HEARTBEAT_FILE.
    env = dict(stacks_env, HANG_RANK="2", HANG_STEP="3", HANG_SECONDS="10", HEARTBEAT="1", STEPS="6")
    res = sgpu.run("launch", "--nproc", 3, "--hang-timeout", "6s", HANG, env=env, timeout=180)
    assert res.returncode == 0, res.stderr
    assert not stacks_dirs(env["SGPU_HOME"])


def test_the_timeout_takes_the_stacks_before_it_stops_the_ranks(sgpu, stacks_env):
    env = dict(stacks_env, HANG_RANK="1", HANG_STEP="2")
    res = sgpu.run("launch", "--nproc", 3, "--timeout", "15s", "-o", "json", HANG, env=env, timeout=180)
    assert res.returncode == 124, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "timed_out"
    message = doc["root_cause"]["message"]
    assert message.startswith("the job ran past --timeout 15s; the odd one out: rank 1"), message
    assert len(stacks_dirs(env["SGPU_HOME"])) == 1


def test_sgpu_stacks_reads_a_detached_job_without_stopping_it(sgpu, stacks_env, cancel_detached_runs):
    env = dict(stacks_env, HANG_RANK="-1", PRINT_EVERY="5")
    res = sgpu.run("launch", "--detach", "--nproc", 4, HANG, env=env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    log = pathlib.Path(env["SGPU_HOME"], "runs", run_id, "ranks", "0", "stdout")
    wait_for(lambda: log.exists() and "step 5" in log.read_text(), 120, "rank 0's fifth step")

    text = sgpu.run("stacks", env=env)  # the newest running run
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith(f"run {run_id}: sgpu: the stacks of 4 ranks (py-spy, "), text.stdout
    assert "verdict:" in text.stdout
    grouped = re.findall(r"^  ranks? [0-9,-]+ \((\d+) of 4\): ", text.stdout, re.M)
    assert sum(map(int, grouped)) == 4, text.stdout

    as_json = sgpu.run("stacks", run_id, "-o", "json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["run_id"] == run_id and doc["world_size"] == 4
    assert sorted(r["rank"] for r in doc["ranks"]) == [0, 1, 2, 3]
    assert all(r["error"] is None and r["tool"] == "py-spy" for r in doc["ranks"])
    assert all(any(t["main"] and t["frames"] for t in r["threads"]) for r in doc["ranks"])
    assert pathlib.Path(doc["dir"], "stacks.json").exists()

    # The job still runs and still makes progress.
    steps = log.read_text().count("step")
    wait_for(lambda: log.read_text().count("step") > steps + 2, 60, "more steps after the stacks")
    assert json.loads(sgpu.run("status", run_id, "-o", "json", env=env).stdout)["state"] == "running"


def test_sgpu_stacks_says_clearly_when_there_is_nothing_to_read(sgpu, stacks_env):
    res = sgpu.run("stacks", env=stacks_env)
    assert res.returncode != 0
    assert "no run is running in" in res.stderr and "sgpu stacks RUN" in res.stderr
    done = sgpu.run("launch", "--nproc", 1, "--no-python", "true", env=stacks_env)
    assert done.returncode == 0
    res = sgpu.run("stacks", "last", env=stacks_env)
    assert res.returncode != 0
    assert re.search(r"run \S+ is not running \(succeeded\); the stacks taken while it ran are in .*/stacks/",
                     res.stderr), res.stderr


def test_a_native_rank_is_read_with_eu_stack(sgpu, stacks_env):
    if shutil.which("eu-stack") is None:
        pytest.fail("eu-stack is missing: scripts/install-deps installs elfutils")
    res = sgpu.run("launch", "--nproc", 2, "--hang-timeout", "2s", "--no-python", "sleep", "60", env=stacks_env)
    assert res.returncode == 124, res.stderr
    assert "(eu-stack, " in res.stderr, res.stderr
    assert re.search(r"ranks 0-1 \(2 of 2\): \S*sleep", res.stderr), res.stderr
    summary = newest_summary(stacks_env)
    assert summary["status"] == "hung"


def test_without_py_spy_the_job_still_ends_as_it_should_and_says_how_to_get_it(sgpu, sgpu_env):
    env = dict(sgpu_env, PATH="/usr/bin:/bin", HANG_RANK="0", HANG_STEP="0")
    env.pop("SGPU_PY_SPY", None)
    res = sgpu.run("launch", "--nproc", 2, "--hang-timeout", "6s", HANG, env=env, timeout=180)
    assert res.returncode == 124, res.stderr
    assert "py-spy not found" in res.stderr and "pip install py-spy" in res.stderr, res.stderr
    assert newest_summary(env)["status"] == "hung"


def test_a_hang_across_two_static_nodes_names_the_host_of_the_stuck_rank(sgpu, stacks_env, tmp_path):
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    env = dict(stacks_env, HANG_RANK="2", HANG_STEP="5", PRINT_EVERY="1")
    args = ["--nproc", 2, "--hang-timeout", "8s"]
    n0 = static_node(sgpu, 2, 0, endpoint, secret, *args, "-o", "json", HANG, env=env)
    n1 = static_node(sgpu, 2, 1, endpoint, secret, *args, HANG, env=env)
    out0, err0 = n0.communicate(timeout=180)
    _, err1 = n1.communicate(timeout=60)
    assert n0.returncode == 124, err0
    assert n1.returncode == 124, err1
    doc = json.loads(out0)
    assert doc["status"] == "hung"
    host = doc["ranks"][2]["host"]
    assert re.search(rf"the odd one out: rank 2 on {re.escape(host)} \(pid \d+\) at hang_ddp\.py:\d+ in stuck_here",
                     doc["root_cause"]["message"]), doc["root_cause"]
    assert "the other 3 are in all_reduce" in doc["root_cause"]["message"]


@pytest.mark.parametrize("value, message", [
    ("0", "--hang-timeout: invalid duration '0': it must be greater than zero (use 'none' for no limit)"),
    ("soon", "--hang-timeout: invalid duration 'soon': expected a number at position 1; valid forms: 3600, 90s"),
])
def test_a_bad_hang_timeout_is_a_clear_error(sgpu, value, message):
    res = sgpu.run("launch", "--nproc", 1, "--hang-timeout", value, "--no-python", "true")
    assert res.returncode == 2, res.stderr
    assert message in res.stderr


def test_the_python_package_beats_the_heart(sgpu, stacks_env, tmp_path):
    script = tmp_path / "beat.py"
    script.write_text("import os, sys, time\nsys.path.insert(0, os.environ['SGPU_PYTHON_PKG'])\n"
                      "import sgpu\nfor _ in range(12):\n    sgpu.heartbeat()\n    time.sleep(0.5)\n")
    env = dict(stacks_env, SGPU_PYTHON_PKG=str(pathlib.Path(__file__).resolve().parents[2] / "python"))
    res = sgpu.run("launch", "--nproc", 1, "--hang-timeout", "3s", script, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
