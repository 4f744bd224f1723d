"""The Python package installed into a fresh virtual environment
(--system-site-packages, for Debian's torch), then @sgpu.distributed and
sgpu.launch driven by real Python callers.

What is installed: the manylinux wheel scripts/wheel made (SGPU_WHEEL_FILE,
as scripts/test sets it: the portable binary inside), else `pip install .`
from a clean copy of the checkout, whose build reuses ccache's objects of
scripts/build. SGPU_WHEEL_VENV names an environment that already has the
wheel, to skip the install."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT, pid_alive

# glibc's own libraries (2.28's libpthread, libdl and librt were still apart).
GLIBC = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "ld-linux-x86-64.so.2", "libpthread.so.0", "libdl.so.2",
         "librt.so.1"}
WHEEL_FILE = os.environ.get("SGPU_WHEEL_FILE", "")


def copy_checkout(dest):
    """What a clone of this checkout holds, with its uncommitted changes: tracked and untracked, not ignored."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


@pytest.fixture(scope="session")
def venv(tmp_path_factory):
    given = os.environ.get("SGPU_WHEEL_VENV")
    if given:
        return pathlib.Path(given)
    work = tmp_path_factory.mktemp("wheel")
    clone, env_dir = work / "clone", work / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(env_dir)], check=True)
    what = WHEEL_FILE
    if not what:
        copy_checkout(clone)
        what = str(clone)
    t0 = time.monotonic()
    res = subprocess.run([str(env_dir / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", what],
                         capture_output=True, text=True, timeout=1500)
    assert res.returncode == 0, res.stdout + res.stderr
    print(f"pip install {what}: {time.monotonic() - t0:.1f}s", file=sys.stderr)
    return env_dir


@pytest.fixture
def py(venv, tmp_path):
    """Runs a Python caller with the venv's interpreter, in tmp_path, SGPU_BIN unset (the wheel's sgpu)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("SGPU_BIN", "SGPU_FAKE_GPUS", "CUDA_VISIBLE_DEVICES", "TORCHELASTIC_ERROR_FILE",
                        "OMP_NUM_THREADS", "PYTHONPATH", "SGPU_PYTHON")}
    env["SGPU_HOME"] = str(tmp_path / "sgpu-home")
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"

    def write(name, code):
        path = tmp_path / name
        path.write_text(textwrap.dedent(code))
        return path

    def run(script, timeout=180, **kw):
        return subprocess.run([str(venv / "bin" / "python"), str(script)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=timeout, **kw)

    def popen(script):
        # The caller stands for a program at a terminal, where Ctrl-C is not
        # ignored; a test run started in the background (`... &` in a script,
        # nohup) inherits SIGINT ignored, and Python would then keep it so.
        return subprocess.Popen([str(venv / "bin" / "python"), str(script)], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    run.write, run.popen, run.env = write, popen, env
    return run


@pytest.mark.parametrize("call, argv", [
    ((("train.py", "--epochs", "3"), {"nproc": 4}), ["launch", "--nproc", "4", "-o", "json", "--", "train.py",
                                                      "--epochs", "3"]),
    ((("m.mod",), {"module": True, "no_python": False, "gpus": None}), ["launch", "--module", "-o", "json", "--",
                                                                        "m.mod"]),
    (((), {"config": "job.toml"}), ["launch", "--config", "job.toml", "-o", "json"]),
    ((("t.py",), {"timeout": None, "grace": 2.5}), ["launch", "--grace", "2.5", "-o", "json", "--", "t.py"]),
    ((("t.py",), {"timeout": "none"}), ["launch", "--timeout", "none", "-o", "json", "--", "t.py"]),
    ((("t.py",), {"timeout": 90.0, "x": ["A", "B=1"]}), ["launch", "--timeout", "90", "-x", "A", "-x", "B=1",
                                                         "-o", "json", "--", "t.py"]),
    ((("t.py",), {"overrides": {"resources.gpus": 8, "job.args": ["--lr", 0.1], "output.raw": True},
                  "env": {"NCCL_DEBUG": "INFO"}}),
     ["launch", "--set", "resources.gpus=8", "--set", 'job.args=["--lr", 0.1]', "--set", "output.raw=true",
      "--set", "env.NCCL_DEBUG=INFO", "-o", "json", "--", "t.py"]),
])
def test_command_line(call, argv):
    sys.path.insert(0, str(ROOT / "python"))
    try:
        from sgpu import command_line
    finally:
        sys.path.remove(str(ROOT / "python"))
    args, kwargs = call
    assert command_line(args[0] if args else None, args[1:], **kwargs) == argv


def last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def test_pip_install_puts_the_static_binary_on_path(venv, py):
    installed = venv / "bin" / "sgpu"
    assert os.access(installed, os.X_OK)
    assert shutil.which("sgpu", path=py.env["PATH"]) == str(installed)
    # Beside it, where sgpu looks first for the stacks of --hang-timeout and `sgpu stacks`.
    assert os.access(venv / "bin" / "py-spy", os.X_OK)
    assert subprocess.run(["sgpu", "--version"], env=py.env, capture_output=True, text=True).stdout.startswith("sgpu ")
    # Nothing but glibc: it runs on a bare Debian 12.
    ldd = subprocess.run(["ldd", str(installed)], capture_output=True, text=True, check=True).stdout
    assert {line.split()[0].rsplit("/", 1)[-1] for line in ldd.splitlines() if line.strip()} <= GLIBC, ldd
    script = py.write("where.py", """
        import json, sgpu
        print(json.dumps({"binary": sgpu.sgpu_binary(), "typed": __import__("importlib.resources").resources
                          .files("sgpu").joinpath("py.typed").is_file()}))
    """)
    res = py(script)
    assert res.returncode == 0, res.stderr
    assert last_json(res.stdout) == {"binary": str(installed), "typed": True}


def test_ddp_training_through_distributed_matches_the_example(py, tmp_path):
    # The example run by `sgpu launch`, then the same training called from a
    # function in __main__ on 4 ranks: the same final loss on every rank.
    example = py.write("example.py", f"""
        import json, sgpu
        s = sgpu.launch("{ROOT}/examples/ddp_mlp.py", "--epochs", "1", nproc=4, python="/usr/bin/python3")
        print(json.dumps({{"exit": s.exit_code, "results": s.results}}))
    """)
    res = py(example)
    assert res.returncode == 0, res.stderr
    plain = last_json(res.stdout)
    assert plain["exit"] == 0
    losses = {r["final_loss"] for r in plain["results"]}
    assert len(losses) == 1

    caller = py.write("caller.py", f"""
        import json, os, sys
        sys.path.insert(0, "{ROOT}/examples")   # the ranks get this sys.path too
        import sgpu

        @sgpu.distributed(nproc=4)
        def train(epochs):
            import ddp_mlp
            sys.argv = ["ddp_mlp.py", "--epochs", str(epochs)]
            ddp_mlp.main()
            with open(os.environ["SGPU_RESULT_FILE"]) as f:   # what the example itself saves
                return json.load(f)

        print(json.dumps(train.distributed(1)))
    """)
    res = py(caller)
    assert res.returncode == 0, res.stderr
    results = last_json(res.stdout)
    assert [r["rank"] for r in results] == [0, 1, 2, 3]
    assert {r["final_loss"] for r in results} == losses
    assert f"[0] final loss {losses.pop():.6f}" in res.stderr  # streamed with its rank's prefix


def test_results_in_rank_order_from_closures_main_and_modules(py):
    py.write("jobs.py", """
        import time, sgpu

        @sgpu.distributed(nproc=4)
        def slow_first(n):
            time.sleep((3 - sgpu.rank()) * 0.1)   # rank 3 finishes first
            return {"rank": sgpu.rank(), "n": n, "world": sgpu.world_size(), "local": sgpu.local_rank()}
    """)
    caller = py.write("caller.py", """
        import json, sgpu
        from jobs import slow_first

        class Point:                       # a class of __main__, returned by the ranks
            def __init__(self, x):
                self.x = x

        def make(scale):
            offsets = [10, 20]             # closed over
            @sgpu.distributed(nproc=2)
            def f(x):
                return Point(offsets[sgpu.rank()] + scale * x)
            return f

        points = make(3).distributed(x=2)
        print(json.dumps({
            "module": slow_first.distributed(7),
            "closure": [p.x for p in points],
            "same_class": all(isinstance(p, Point) for p in points),
            "local_call": slow_first(1)["world"],
        }))
    """)
    res = py(caller)
    assert res.returncode == 0, res.stderr
    out = last_json(res.stdout)
    assert out["module"] == [{"rank": r, "n": 7, "world": 4, "local": r} for r in range(4)]
    assert out["closure"] == [16, 26]
    assert out["same_class"] is True
    assert out["local_call"] == 1  # called plainly, it runs here: world of one


def test_a_raising_rank_reraises_its_exception_naming_the_rank(py):
    caller = py.write("caller.py", """
        import json, os, time, traceback, sgpu

        @sgpu.distributed(nproc=3)
        def job():
            if sgpu.rank() == 2:
                raise ValueError("bad shard 7")
            time.sleep(120)                # stopped by sgpu when rank 2 fails

        t0 = time.monotonic()
        try:
            job.distributed()
        except ValueError as e:
            summary = e.sgpu_summary
            print(json.dumps({
                "message": str(e), "rank": e.sgpu_rank, "seconds": time.monotonic() - t0,
                "cause": str(e.__cause__), "cause_type": type(e.__cause__).__name__,
                "printed": "".join(traceback.format_exception(e)),
                "pids": [r["pid"] for r in summary["ranks"]],
                "verdicts": [r["verdict"] for r in summary["ranks"]],
            }))
    """)
    res = py(caller)
    assert res.returncode == 0, res.stderr
    out = last_json(res.stdout)
    assert out["message"] == "bad shard 7" and out["rank"] == 2
    assert out["cause_type"] == "RemoteTraceback"
    assert out["cause"].startswith("rank 2 of 3 (on ")
    assert 'raise ValueError("bad shard 7")' in out["cause"]  # the rank's own traceback
    assert "raised by rank 2" in out["printed"]
    assert out["verdicts"] == ["terminated_by_sgpu", "terminated_by_sgpu", "failed"]
    assert out["seconds"] < 60
    assert not any(pid_alive(p) for p in out["pids"])  # the teardown happened before the raise


def test_timeout(py):
    caller = py.write("caller.py", """
        import json, time, sgpu

        @sgpu.distributed(nproc=2, timeout=1, grace="1s")
        def forever():
            time.sleep(120)

        try:
            forever.distributed()
        except sgpu.JobTimeout as e:
            print(json.dumps({"timeout_error": isinstance(e, TimeoutError), "exit": e.exit_code,
                              "status": e.summary.status, "pids": [r["pid"] for r in e.summary.ranks]}))
    """)
    t0 = time.monotonic()
    res = py(caller)
    assert res.returncode == 0, res.stderr
    out = last_json(res.stdout)
    assert out == {"timeout_error": True, "exit": 124, "status": "timed_out", "pids": out["pids"]}
    assert not any(pid_alive(p) for p in out["pids"])
    assert time.monotonic() - t0 < 30


def test_keyboard_interrupt_cancels_the_run_and_leaves_no_rank(py):
    caller = py.write("caller.py", """
        import os, sys, time, sgpu

        @sgpu.distributed(nproc=2, timeout=90)   # a bound, should the interrupt be lost
        def wait():
            print(f"ready {os.getpid()}", flush=True)
            time.sleep(120)

        try:
            wait.distributed()
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(42)
    """)
    proc = py.popen(caller)
    pids = []
    try:
        for line in proc.stderr:  # the ranks' lines, streamed live: waits on them, not on a clock
            if " ready " in f" {line}":
                pids.append(int(line.split()[-1]))
            if len(pids) == 2:
                break
        assert len(pids) == 2
        proc.send_signal(signal.SIGINT)  # what Ctrl-C does to the caller
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 42, err
    assert "interrupted" in out
    assert not any(pid_alive(p) for p in pids)


def test_launch_returns_the_summary_and_refusals_raise(py):
    caller = py.write("caller.py", """
        import json, sgpu
        s = sgpu.launch("sh", "-c", 'echo "{\\\\"r\\\\": $RANK}" > $SGPU_RESULT_FILE', nproc=2, no_python=True,
                        env={"FOO": "1"})
        try:
            sgpu.launch("x.py", nproc=2, timeout="soon")
            refused = None
        except sgpu.UsageError as e:
            refused = str(e)
        print(json.dumps({"status": s.status, "results": s.results, "env": s["spec"]["env"], "refused": refused}))
    """)
    res = py(caller)
    assert res.returncode == 0, res.stderr
    out = last_json(res.stdout)
    assert out["status"] == "completed" and out["results"] == [{"r": 0}, {"r": 1}]
    assert out["env"] == {"FOO": "1"}
    assert "--timeout" in out["refused"] and "soon" in out["refused"]
