"""8. Python: fn.distributed() against `sgpu launch` of the same script (issue 19's target: at most 1.3x)."""
import json
import os
import subprocess

from harness import Peer, Row, median
from report import Section, fmt_ratio, shell, timing_table

TARGET = 1.3


def venv_python(ctx):
    """The project's virtual environment (scripts/venv: cloudpickle), or why there is none."""
    try:
        path = subprocess.run(["scripts/venv"], cwd=ctx.root, capture_output=True, text=True, timeout=600,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"scripts/venv failed: {e}"
    return os.path.join(path, "bin", "python"), ""


def run(ctx):
    s = Section("python", "8. Python: fn.distributed() against sgpu launch")
    s.intro = ("The calling overhead of `@sgpu.distributed`: `fn.distributed()` of a function that returns at once "
               "(each rank unpickles it, calls it and pickles its rank back; the caller reads the four results), "
               "against `sgpu launch --nproc 4` of the same script (whose ranks import sgpu and call the function "
               "once), both timed from one Python process, alternating, call to return. The package runs from "
               "`python/` with this sgpu binary (`SGPU_BIN`); cloudpickle comes from scripts/venv.")
    rounds = 4 if ctx.quick else ctx.rounds_for(3) * 5
    dist = Row(Peer("fn.distributed()", []))
    launch = Row(Peer("sgpu launch (same script)", [], "sgpu"))
    python, why = venv_python(ctx)
    if python is None:
        s.skipped = why
        return s
    out = os.path.join(ctx.work, "python_call.json")
    env = dict(ctx.env, PYTHONPATH=os.path.join(ctx.root, "python"), SGPU_BIN=os.path.join(ctx.root, ctx.sgpu))
    argv = [python, "bench/python_call.py", str(rounds), env["SGPU_BIN"], out]
    p = subprocess.run(argv, cwd=ctx.root, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
        dist.fail(why)
        launch.fail(why)
        s.sgpu_failure = why
    else:
        times = json.load(open(out))
        dist.values, launch.values = times["distributed"], times["launch"]
    s.table = timing_table([launch, dist])
    s.commands = [shell(["python", "bench/python_call.py", str(rounds), "build/apps/sgpu/sgpu", "out.json"])]
    if dist.ok and launch.ok:
        r = median(dist.values) / median(launch.values)
        verdict = "within" if r <= TARGET else "OVER"
        s.headline.append(("fn.distributed() ÷ sgpu launch", f"{fmt_ratio(r)} ({verdict} the {TARGET}x target)"))
    return s
