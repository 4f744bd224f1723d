"""End-to-end tests: they drive the real sgpu binary ($SGPU_BIN) with real
processes, and Debian's python3-torch (/usr/bin/python3) as the DDP client."""
import json
import os
import re
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAMS = pathlib.Path(__file__).resolve().parent / "programs"
TORCH_PYTHON = os.environ.get("SGPU_TEST_PYTHON", "/usr/bin/python3")
SANITIZED = os.environ.get("SGPU_SANITIZED") == "1"


def pytest_configure(config):
    # scripts/test runs the suite on several workers, then these one at a time.
    config.addinivalue_line("markers", "alone: a test whose timing bound does not hold beside other tests (ASan, "
                                       "two cores); scripts/test runs it after the rest, one at a time")


def sgpu_bin():
    path = os.environ.get("SGPU_BIN", str(ROOT / "build" / "apps" / "sgpu" / "sgpu"))
    if not os.access(path, os.X_OK):
        pytest.exit(f"sgpu binary not found at {path}: build it (scripts/build) or set SGPU_BIN", 2)
    return path


@pytest.fixture
def sgpu_env(tmp_path):
    env = dict(os.environ)
    env["SGPU_HOME"] = str(tmp_path / "sgpu-home")
    env["SGPU_PYTHON"] = TORCH_PYTHON
    env.pop("SGPU_FAKE_GPUS", None)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("OMP_NUM_THREADS", None)
    env.pop("TORCHELASTIC_ERROR_FILE", None)
    return env


class Sgpu:
    def __init__(self, env, cwd):
        self.bin = sgpu_bin()
        self.env = env
        self.cwd = cwd

    def run(self, *args, timeout=120, env=None, input=None):
        return subprocess.run([self.bin, *map(str, args)], env=env or self.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=timeout, input=input)

    def popen(self, *args, env=None, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen([self.bin, *map(str, args)], env=env or self.env, cwd=self.cwd, text=True, **kw)


@pytest.fixture
def sgpu(sgpu_env, tmp_path):
    return Sgpu(sgpu_env, tmp_path)


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for_files(out, pattern, n, timeout=60):
    """Until `out` holds n files matching `pattern` (what ranks leave as they reach a point)."""
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(list(out.glob(pattern))) >= n:
            return
        time.sleep(0.02)
    raise AssertionError(f"only {len(list(out.glob(pattern)))} of {n} {pattern}")


def python_program(name):
    return str(PROGRAMS / name)


def newest_summary(home):
    """summary.json of the newest run under SGPU_HOME `home` (a path or an env dict)."""
    import json
    if isinstance(home, dict):
        home = home["SGPU_HOME"]
    runs = sorted(pathlib.Path(home, "runs").glob("*/summary.json"), key=lambda p: p.stat().st_mtime)
    assert runs, f"no summary.json under {home}/runs"
    return json.loads(runs[-1].read_text())


def assert_one_exit_code(returncode, home=None, stdout=None):
    """What a user checks: sgpu's exit code, summary.json's and `-o json`'s are one number."""
    import json
    if stdout is not None:
        doc = json.loads(stdout)
        assert doc["exit_code"] == returncode, doc
        assert doc["root_cause"] is not None or returncode == 0, doc
    if home is not None:
        summary = newest_summary(home)
        assert summary["exit_code"] == returncode, summary
        assert (summary["root_cause"] is None) == (returncode == 0), summary


RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


@pytest.fixture
def cancel_detached_runs(sgpu):
    """A detached run outlives its test by design: a failing test must not leave one behind."""
    yield
    res = sgpu.run("runs", "--all", "-o", "json")
    for run in json.loads(res.stdout or "[]"):
        if run["state"] == "running":
            sgpu.run("cancel", run["run_id"], "--log-dir", os.path.dirname(run["run_dir"]))
