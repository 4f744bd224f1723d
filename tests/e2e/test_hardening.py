"""Adversarial inputs: what ranks, files, the terminal and the command line can
throw at sgpu, each against the real binary."""
import glob
import json
import os
import re
import stat
import subprocess
import time

import pytest

from conftest import pid_alive


def run_dir(sgpu, home=None):
    (path,) = glob.glob(os.path.join(home or sgpu.env["SGPU_HOME"], "runs", "*"))
    return path


def summary(sgpu):
    with open(os.path.join(run_dir(sgpu), "summary.json")) as f:
        return json.load(f)


def python_job(tmp_path, name, source):
    path = tmp_path / name
    path.write_text(source)
    return path


# --- rank files -------------------------------------------------------------

def test_deeply_nested_json_in_rank_files_is_left_out_and_said(sgpu, tmp_path):
    deep = "[" * 50000 + "]" * 50000
    job = python_job(tmp_path, "deep.py", f"""
import os, sys
open(os.environ["SGPU_RESULT_FILE"], "w").write({deep!r})
open(os.environ["TORCHELASTIC_ERROR_FILE"], "w").write('{{"message": ' + {deep!r} + '}}')
print("boom", file=sys.stderr)
sys.exit(3)
""")
    res = sgpu.run("launch", "--nproc", 1, job, timeout=60)
    assert res.returncode == 3, res.stderr
    doc = summary(sgpu)
    assert doc["results"] == [None]
    assert os.path.getsize(os.path.join(run_dir(sgpu), "summary.json")) < 64 << 10
    assert doc["root_cause"]["source"] == "stderr" and "boom" in doc["root_cause"]["details"]
    assert any("result: JSON nested deeper than 64 levels, left out of the summary" in w for w in doc["warnings"])
    assert any("error.json: JSON nested deeper than 64 levels, not read" in w for w in doc["warnings"])
    assert "nested deeper than 64 levels" in res.stderr


def test_a_result_file_that_is_a_fifo_does_not_hang_sgpu(sgpu):
    res = sgpu.run("launch", "--nproc", 1, "--no-python", "sh", "-c", 'rm -f "$SGPU_RESULT_FILE"; mkfifo "$SGPU_RESULT_FILE"',
                   timeout=30)
    assert res.returncode == 0, res.stderr
    assert "result: it is not a regular file, left out of the summary (result null)" in res.stderr
    assert summary(sgpu)["results"] == [None]


# --- durations --------------------------------------------------------------

@pytest.mark.parametrize("flag,value", [("--timeout", "99999999999"), ("--timeout", "3000000h"),
                                        ("--grace", "3000000h"), ("--grace", "366d")])
@pytest.mark.parametrize("dry_run", [True, False])
def test_huge_durations_are_refused_with_2(sgpu, flag, value, dry_run):
    args = ["launch", *(["--dry-run"] if dry_run else []), flag, value, "--nproc", 1, "--no-python", "true"]
    res = sgpu.run(*args, timeout=30)
    assert res.returncode == 2, res.stderr
    assert f"{flag}: invalid duration '{value}': it is too large (at most 365d)" in res.stderr
    assert not glob.glob(os.path.join(sgpu.env["SGPU_HOME"], "runs", "*"))


def test_huge_durations_in_toml_are_refused_with_2(sgpu, tmp_path):
    config = tmp_path / "job.toml"
    config.write_text("[timeouts]\ntimeout = 99999999999\n")
    res = sgpu.run("launch", "--dry-run", "--config", config, "--nproc", 1, "--no-python", "true", timeout=30)
    assert res.returncode == 2, res.stderr
    assert "too large (at most 365d)" in res.stderr


# --- descriptors --------------------------------------------------------------

def test_a_closed_stderr_does_not_break_a_launch(sgpu, tmp_path):
    out = tmp_path / "out.txt"
    line = f"exec '{sgpu.bin}' launch --nproc 2 --no-python sh -c 'echo hi $RANK' > '{out}' 2>&-"
    res = subprocess.run(["sh", "-c", line], env=sgpu.env, cwd=sgpu.cwd, timeout=60)
    assert res.returncode == 0
    assert sorted(out.read_text().split("\n")[:2]) == ["[0] hi 0", "[1] hi 1"]
    assert summary(sgpu)["status"] == "completed"


LIST_FDS = """
import os
spare = []
for fd in range(3, 4096):
    try:
        os.fstat(fd)
        spare.append(fd)
    except OSError:
        pass
print("spare", spare)
"""


def test_ranks_get_only_descriptors_0_1_2(sgpu, tmp_path):
    job = python_job(tmp_path, "fds.py", LIST_FDS)
    res = sgpu.run("launch", "--nproc", 2, job, timeout=60)
    assert res.returncode == 0, res.stderr
    assert sorted(re.findall(r"^\[\d\] spare (.*)$", res.stdout, re.M)) == ["[]", "[]"], res.stdout


DAEMON = """
import os, subprocess, sys, time
# A daemon that closes its stdio, in a session of its own.
p = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True)
# A classic double fork: setsid, fork again, the middle one exits.
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.close(r)
        os.write(w, str(os.getpid()).encode())
        os.close(w)
        for fd in (0, 1, 2):
            os.close(fd)
        time.sleep(300)
    os._exit(0)
os.close(w)
grandchild = os.read(r, 32).decode()
print("pids", p.pid, grandchild)
print("ended", time.time(), flush=True)
"""


def test_detached_daemons_do_not_outlive_the_run_nor_hold_it(sgpu, tmp_path):
    job = python_job(tmp_path, "daemon.py", DAEMON)
    res = sgpu.run("launch", "--nproc", 1, job, timeout=60)
    took = time.time() - float(re.search(r"ended (\S+)", res.stdout).group(1))  # from the rank's end, not sgpu's start
    assert res.returncode == 0, res.stderr
    pids = [int(p) for p in re.search(r"pids (\d+) (\d+)", res.stdout).groups()]
    assert not any(pid_alive(p) for p in pids)
    for p in pids:
        assert f"sgpu: warning: killed pid {p} (" in res.stderr, res.stderr
    # Nothing holds a copy of the rank's pipes: no wait for the 2 s drain limit.
    assert took < 1.5, took


# --- the terminal -------------------------------------------------------------

def test_a_rank_reading_the_terminal_fails_at_once_instead_of_stopping(sgpu, tmp_path):
    job = python_job(tmp_path, "ask.py", "import getpass\nprint('got', getpass.getpass('password: '))\n")
    line = " ".join(f"'{a}'" for a in [sgpu.bin, "launch", "--nproc", 1, "--timeout", "60s", job])
    start = time.monotonic()
    res = subprocess.run(["script", "-qefc", line, "/dev/null"], env=sgpu.env, cwd=sgpu.cwd, capture_output=True,
                         stdin=subprocess.DEVNULL, timeout=50)
    text = res.stdout.decode(errors="replace")
    assert time.monotonic() - start < 20, text
    assert res.returncode == 1, text
    assert "EOFError" in text


# --- paths ----------------------------------------------------------------------

@pytest.mark.parametrize("target,message", [(None, "is a directory"), ("/dev/zero", "is not a regular file")])
def test_config_that_is_not_a_file_is_refused(sgpu, tmp_path, target, message):
    res = sgpu.run("launch", "--config", target or tmp_path, "--nproc", 1, "--no-python", "true", timeout=30)
    assert res.returncode == 2, res.stderr
    assert f"--config {target or tmp_path}: {message}" in res.stderr


def test_log_dir_expands_the_home_directory(sgpu, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = dict(sgpu.env, HOME=str(home))
    res = sgpu.run("launch", "--log-dir", "~/x", "--nproc", 1, "--no-python", "true", env=env, timeout=30)
    assert res.returncode == 0, res.stderr
    assert len(glob.glob(str(home / "x" / "*" / "summary.json"))) == 1
    assert not (tmp_path / "~").exists()


def without_home(sgpu, tmp_path):
    env = {k: v for k, v in sgpu.env.items() if k not in ("HOME", "SGPU_HOME", "XDG_STATE_HOME")}
    env["TMPDIR"] = str(tmp_path)
    return env


def test_without_home_runs_go_to_a_private_per_user_directory(sgpu, tmp_path):
    res = sgpu.run("launch", "--nproc", 1, "--no-python", "true", env=without_home(sgpu, tmp_path), timeout=30)
    assert res.returncode == 0, res.stderr
    private = tmp_path / f"sgpu-{os.geteuid()}"
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert len(glob.glob(str(private / "runs" / "*" / "summary.json"))) == 1


def test_without_home_a_shared_directory_is_refused(sgpu, tmp_path):
    shared = tmp_path / f"sgpu-{os.geteuid()}"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    res = sgpu.run("launch", "--nproc", 1, "--no-python", "true", env=without_home(sgpu, tmp_path), timeout=30)
    assert res.returncode == 1
    assert f"HOME is not set, and {shared} (where runs would go instead) is not a private directory" in res.stderr
    assert not (shared / "runs").exists()


# --- secrets ----------------------------------------------------------------------

def test_secrets_are_masked_in_run_files_and_the_run_directory_is_private(sgpu, tmp_path):
    config = tmp_path / "job.toml"
    config.write_text('[env]\nDB_URL = "postgres://me:hunter2@db/x"\n')
    res = sgpu.run("launch", "--config", config, "--set", "env.WANDB_API_KEY=abc123", "--nproc", 1, "-o", "json",
                   "--no-python", "sh", "-c", 'echo "$WANDB_API_KEY $DB_URL"', timeout=30)
    assert res.returncode == 0, res.stderr
    rd = run_dir(sgpu)
    assert stat.S_IMODE(os.stat(rd).st_mode) == 0o700
    for name in ("spec.json", "summary.json"):
        text = open(os.path.join(rd, name)).read()
        assert "abc123" not in text and "hunter2" not in text, name
    env = json.loads(res.stdout)["spec"]["env"]
    assert env == {"DB_URL": "postgres://me:****@db/x", "WANDB_API_KEY": "****"}
    assert "[0] abc123 postgres://me:hunter2@db/x" in res.stderr  # the rank itself gets the real values


# --- the command line ---------------------------------------------------------------

def test_an_unknown_command_is_named_with_the_valid_ones(sgpu):
    res = sgpu.run("bogus", timeout=30)
    assert res.returncode == 2
    assert res.stderr.startswith("sgpu: error: unknown command 'bogus'; valid: launch, devices, agent")
    res = sgpu.run("lanch", "x.py", timeout=30)
    assert res.returncode == 2 and "(did you mean 'launch'?)" in res.stderr


def test_launch_help_shows_how_to_pass_the_entrypoint(sgpu):
    res = sgpu.run("launch", "--help", timeout=30)
    assert res.returncode == 0
    for usage in ("sgpu launch [OPTIONS] script.py [ARGS...]", "sgpu launch [OPTIONS] -m package.module [ARGS...]",
                  "sgpu launch [OPTIONS] --no-python program [ARGS...]"):
        assert usage in res.stdout


def test_double_dash_ends_the_options_for_an_entrypoint_starting_with_a_dash(sgpu, tmp_path):
    prog = tmp_path / "-prog"
    prog.write_text('#!/bin/sh\necho "dash-ok $*"\n')
    prog.chmod(0o755)
    (tmp_path / "-job.py").write_text("import sys\nprint('script-ok', sys.argv[1:])\n")
    env = dict(sgpu.env, PATH=f"{tmp_path}:{sgpu.env['PATH']}")
    res = sgpu.run("launch", "--nproc", 1, "--no-python", "--", "-prog", "-a", env=env, timeout=30)
    assert res.returncode == 0, res.stderr
    assert "[0] dash-ok -a" in res.stdout
    res = sgpu.run("launch", "--nproc", 1, "--", "-job.py", "-v", timeout=30)
    assert res.returncode == 0, res.stderr
    assert "[0] script-ok ['-v']" in res.stdout
    # Before the entrypoint, an unknown option is still an error.
    res = sgpu.run("launch", "--nproc", 1, "--bogus", "x.py", timeout=30)
    assert res.returncode == 2 and "unknown option '--bogus'" in res.stderr
