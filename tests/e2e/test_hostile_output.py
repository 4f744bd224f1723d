"""sgpu's own output against a hostile stdout and stderr: /dev/full, a pipe
nobody reads, a full disk (a small tmpfs). Diagnostics never change the exit
code; the command's real output failing gives exit 1 (never a signal); with
-o json every ending prints one document with its exit code."""
import contextlib
import json
import os
import pathlib
import subprocess

import pytest

from multinode import free_port, make_secret_file, static_node

ORPHAN_AND_FAIL = "setsid sleep 60 </dev/null >/dev/null 2>&1 & exit 5"


def run(sgpu, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=None, env=None, timeout=60):
    return subprocess.run([sgpu.bin, *map(str, args)], env=env or sgpu.env, cwd=cwd or sgpu.cwd, stdout=stdout,
                          stderr=stderr, timeout=timeout)


@contextlib.contextmanager
def dev_full():
    with open("/dev/full", "w") as f:
        yield f


@contextlib.contextmanager
def closed_pipe():
    """The write end of a pipe whose reader is gone: `... | (exec 0<&-)`."""
    r, w = os.pipe()
    os.close(r)
    try:
        yield w
    finally:
        os.close(w)


def assert_not_signalled(res):
    assert res.returncode >= 0, f"sgpu died by signal {-res.returncode}"
    assert res.returncode not in (134, 141), res.returncode


# ---- stderr that cannot be written: the exit code stays the job's ----------

@pytest.mark.parametrize("program, code", [("true", 0), ("false", 1), ("exit 5", 5)])
def test_stderr_on_dev_full_keeps_the_jobs_exit_code(sgpu, program, code):
    with dev_full() as full:
        res = run(sgpu, "launch", "--nproc", 2, "--no-python", "sh", "-c", program, stderr=full)
    assert_not_signalled(res)
    assert res.returncode == code


@pytest.mark.parametrize("args, code", [
    (["launch", "--nproc", 0, "--no-python", "true"], 2),
    (["launch", "--no-python", "/nonexistent/prog"], 127),
    (["bogus"], 2),
])
def test_stderr_on_dev_full_keeps_the_error_code(sgpu, args, code):
    with dev_full() as full:
        res = run(sgpu, *args, stderr=full)
    assert_not_signalled(res)
    assert res.returncode == code


def test_the_warning_after_the_run_on_a_full_stderr_keeps_the_code(sgpu):
    # A rank leaves a process outside its group: the warning about killing
    # it is printed after the run, once the code is known.
    with dev_full() as full:
        res = run(sgpu, "launch", "-o", "json", "--nproc", 1, "--no-python", "sh", "-c", ORPHAN_AND_FAIL, stderr=full)
    assert_not_signalled(res)
    assert res.returncode == 5
    assert json.loads(res.stdout)["exit_code"] == 5


@pytest.mark.parametrize("args, code", [
    (["bogus"], 2),
    (["launch", "--nproc", 2, "--no-python", "false"], 1),
])
def test_stdout_and_stderr_into_a_closed_pipe_keep_the_code(sgpu, args, code):
    with closed_pipe() as w:
        res = run(sgpu, *args, stdout=w, stderr=w)
    assert_not_signalled(res)
    assert res.returncode == code


def test_ranks_get_the_default_sigpipe_though_sgpu_ignores_it(sgpu):
    # Guards the other side of ignoring SIGPIPE in sgpu: `python train.py | head`
    # inside a rank must still end the writer by the signal.
    res = run(sgpu, "launch", "--nproc", 1, "--no-python", "grep", "SigIgn", "/proc/self/status")
    assert res.returncode == 0, res.stderr
    ignored = int(res.stdout.decode().split()[-1], 16)
    assert not ignored & (1 << (13 - 1)), res.stdout  # SIGPIPE is 13


# ---- the command's output that cannot be written: exit 1, never a signal ---

OUTPUT_COMMANDS = [
    ["--help"],
    ["launch", "--help"],
    ["runs"],
    ["runs", "-o", "json"],
    ["devices"],
    ["launch", "--dry-run", "--nproc", 2, "--no-python", "true"],
    ["launch", "--dry-run", "-o", "json", "--nproc", 2, "--no-python", "true"],
]


@pytest.mark.parametrize("args", OUTPUT_COMMANDS, ids=lambda a: " ".join(map(str, a)))
def test_output_to_a_full_disk_is_an_error(sgpu, args):
    with dev_full() as full:
        res = run(sgpu, *args, stdout=full)
    assert_not_signalled(res)
    assert res.returncode == 1
    assert b"sgpu: error: cannot write to stdout: No space left on device" in res.stderr


@pytest.mark.parametrize("args", OUTPUT_COMMANDS, ids=lambda a: " ".join(map(str, a)))
def test_output_into_a_closed_pipe_is_exit_1_not_sigpipe(sgpu, args):
    with closed_pipe() as w:
        res = run(sgpu, *args, stdout=w)
    assert_not_signalled(res)
    assert res.returncode == 1
    assert b"Broken pipe" not in res.stderr  # the reader chose to stop: nothing to say


def test_the_detached_run_id_lost_to_a_full_disk_is_an_error(sgpu):
    with dev_full() as full:
        res = run(sgpu, "launch", "--detach", "--nproc", 1, "--no-python", "true", stdout=full)
    assert_not_signalled(res)
    assert res.returncode == 1
    assert b"cannot write to stdout" in res.stderr
    assert run(sgpu, "wait", "last").returncode == 0  # the run itself went on


# ---- a full disk under the log directory -----------------------------------

@pytest.fixture
def full_disk(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    try:
        (mnt / "runs").mkdir()
        with open(mnt / "filler", "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(b"\0" * 4096)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.mark.parametrize("json_output", [False, True])
def test_detach_with_its_log_dir_on_a_full_disk_says_why(sgpu, full_disk, json_output):
    args = ["-o", "json"] if json_output else []
    res = run(sgpu, "launch", "--detach", *args, "--log-dir", full_disk / "runs", "--nproc", 1, "--no-python", "true")
    assert_not_signalled(res)
    assert res.returncode != 0
    assert b"sgpu: error" in res.stderr, res.stderr
    if json_output:
        assert json.loads(res.stdout)["exit_code"] == res.returncode


# ---- -o json: every ending prints one document with its exit code --------

JSON_USAGE_ERRORS = [
    ["--nproc", 0, "--no-python", "true"],
    ["--bogus-flag", "train.py"],
    ["--timeout", "5x", "--no-python", "true"],
    ["--dry-run", "missing.py"],
    ["--nproc"],  # a flag without its value: CLI11's own error
    ["--log-dir", "", "--no-python", "true"],
]


@pytest.mark.parametrize("args", JSON_USAGE_ERRORS, ids=lambda a: " ".join(map(str, a)) or "''")
def test_json_output_on_a_usage_error_prints_one_document(sgpu, args):
    res = run(sgpu, "launch", "-o", "json", *args)
    assert res.returncode == 2, res.stderr
    doc = json.loads(res.stdout)
    assert doc["exit_code"] == 2
    assert doc["status"] == "not_started"
    assert doc["root_cause"]["message"]


def test_json_output_asked_by_set_counts_too(sgpu):
    res = run(sgpu, "launch", "--set", "output.format=json", "--nproc", 0, "--no-python", "true")
    assert res.returncode == 2
    assert json.loads(res.stdout)["exit_code"] == 2


def test_json_output_from_a_deleted_working_directory(sgpu, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    res = subprocess.run(["sh", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "$0" "$@"', sgpu.bin, "launch", "-o",
                          "json", "--no-python", "true"], env=sgpu.env, capture_output=True, timeout=60)
    assert res.returncode != 0
    assert json.loads(res.stdout)["exit_code"] == res.returncode


def test_json_output_of_a_run_command_usage_error(sgpu):
    res = run(sgpu, "runs", "-o", "json", "--limit", 0)
    assert res.returncode == 2
    assert json.loads(res.stdout)["exit_code"] == 2


def test_json_output_on_every_node_of_a_static_launch(sgpu, tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    secret = make_secret_file(tmp_path / "secret")
    nodes = [static_node(sgpu, 2, k, endpoint, secret, "-o", "json", "--nproc", 1, "--no-python", "sh", "-c",
                         "exit 3") for k in (0, 1)]
    for node in nodes:
        out, err = node.communicate(timeout=120)
        assert node.returncode == 3, err
        assert json.loads(out)["exit_code"] == 3


# ---- small things a user sees -----------------------------------------------

def test_a_range_error_is_short(sgpu):
    res = run(sgpu, "runs", "--limit", 0)
    assert res.returncode == 2
    assert b"179769" not in res.stderr
    assert b"--limit: 0 is below 1; give 1 or more" in res.stderr


def test_a_missing_sgpu_python_is_named_as_the_variable(sgpu):
    env = dict(sgpu.env, SGPU_PYTHON="/nonexistent/python")
    (pathlib.Path(sgpu.cwd) / "train.py").write_text("")
    res = run(sgpu, "launch", "train.py", env=env)
    assert res.returncode == 127
    assert b"(from SGPU_PYTHON)" in res.stderr, res.stderr


@pytest.fixture
def one_run(sgpu):
    assert run(sgpu, "launch", "--nproc", 1, "--no-python", "true").returncode == 0
    return "last"


def test_logs_ranks_out_of_range_names_ranks(sgpu, one_run):
    res = run(sgpu, "logs", one_run, "--ranks", "0-3")
    assert res.returncode == 2
    assert b"--ranks 1:" in res.stderr, res.stderr


def test_logs_negative_tail_is_refused(sgpu, one_run):
    res = run(sgpu, "logs", one_run, "--tail", "-1")
    assert res.returncode == 2
    assert b"--tail" in res.stderr


@pytest.mark.parametrize("args", [["launch", "--log-dir", "", "--no-python", "true"], ["runs", "--log-dir", ""]])
def test_an_empty_log_dir_is_refused(sgpu, args):
    res = run(sgpu, *args)
    assert res.returncode == 2
    assert b"an empty path" in res.stderr, res.stderr


ERROR_FILE_WRITER = r"""
import json, os
evil = "\x1b]0;pwned\x07\x1b[2J\r\nsgpu: everything is fine\u009b31m"
with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
    json.dump({"message": {"message": evil, "extraInfo": {"py_callstack": "Traceback:\n" + evil, "timestamp": "1"}}}, f)
raise SystemExit(3)
"""


def test_control_characters_of_an_error_file_are_escaped(sgpu, tmp_path):
    script = tmp_path / "evil.py"
    script.write_text(ERROR_FILE_WRITER)
    res = run(sgpu, "launch", "--nproc", 1, script)
    assert res.returncode == 3, res.stderr
    report = res.stderr.decode()
    assert "\x1b" not in report and "\x07" not in report and "\r" not in report and "\u009b" not in report
    assert "\nsgpu: everything is fine" not in report
    assert "\\x1b]0;pwned\\x07" in report


def test_a_warning_is_listed_once(sgpu, tmp_path):
    # An error file nested too deep is not read: one warning, not one per
    # reading of the last attempt's files.
    script = tmp_path / "deep.py"
    script.write_text("import os\nopen(os.environ['TORCHELASTIC_ERROR_FILE'], 'w').write('[' * 5000 + ']' * 5000)\n"
                      "raise SystemExit(3)\n")
    res = run(sgpu, "launch", "--nproc", 1, script)
    assert res.returncode == 3
    lines = [ln for ln in res.stderr.decode().splitlines() if "not read (error file)" in ln]
    assert len(lines) == 1, res.stderr
