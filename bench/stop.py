"""Stopping: a SIGTERM to the launcher until the last of 8 local ranks has it
(README "Stopping well"), against `kill` of each rank by hand as the floor."""
import os
import signal
import subprocess
import sys
import time

from harness import Peer, median
from peers import alternate, rows_for
from report import Section, fmt_ratio, shell, timing_table

N = 8


def wait_for(path_of, n, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(os.path.exists(path_of(r)) for r in range(n)):
            return True
        time.sleep(0.01)
    return False


def one_run(ctx, row):
    d = ctx.scratch("stop")
    env = dict(ctx.env, BENCH_DIR=d)
    ready = lambda r: os.path.join(d, f"ready-{r}")  # noqa: E731
    term = lambda r: os.path.join(d, f"term-{r}")  # noqa: E731
    procs = []
    if row.peer.role == "sgpu":
        procs.append(subprocess.Popen(row.peer.argv, env=env, cwd=ctx.root, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
    else:
        for r in range(N):
            procs.append(subprocess.Popen(row.peer.argv, env=dict(env, RANK=str(r)), cwd=ctx.root))
    try:
        if not wait_for(ready, N):
            row.fail("the ranks did not start")
            return
        pids = [int(open(ready(r)).read()) for r in range(N)]
        sent = time.time_ns()
        if row.peer.role == "sgpu":
            procs[0].send_signal(signal.SIGTERM)
        else:
            for pid in pids:
                os.kill(pid, signal.SIGTERM)
        if not wait_for(term, N, timeout=30):
            row.fail("a rank never got SIGTERM")
            return
        arrived = [int(open(term(r)).read()) for r in range(N)]
        row.values.append((max(arrived) - sent) / 1e9)
        row.extra.setdefault("spread", []).append((max(arrived) - min(arrived)) / 1e9)
    finally:
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def fmt_ms(s):
    return f"{s * 1000:.2f} ms"


def run(ctx):
    s = Section("stop", "Stopping: SIGTERM to the launcher until the last of 8 ranks has it")
    s.intro = ("8 Python ranks wait for SIGTERM and write when it arrived. sgpu: SIGTERM to `sgpu launch`, which "
               "passes the stop signal to every rank's own process; the floor: the benchmark `kill`s each rank by "
               "hand, one after another. The figure is from the signal sent until the last rank's handler ran; "
               "'spread' is the first rank's arrival to the last's.")
    rank = [sys.executable, "bench/stop_rank.py"]
    rows = rows_for([Peer("sgpu", [ctx.sgpu, "launch", "--nproc", str(N), "--no-python", *rank], "sgpu"),
                     Peer("floor (kill by hand)", rank, "floor")])
    alternate(ctx, "stop", rows, ctx.rounds_for(5), lambda row, i: one_run(ctx, row))
    extra = [("spread between ranks (median)",
              lambda r: fmt_ms(median(r.extra["spread"])) if r.extra.get("spread") else "-")]
    s.table = timing_table(rows, value_name="SIGTERM -> last rank", fmt=fmt_ms, extra_cols=extra)
    s.commands = [shell(rows[0].peer.argv, {"BENCH_DIR": "<dir>"}), "kill -TERM <each rank's pid>"]
    base, fl = rows
    if not base.ok:
        s.sgpu_failure = base.failure
    elif fl.ok:
        s.headline.append(("sgpu - floor, SIGTERM to the last of 8 ranks",
                           fmt_ms(median(base.values) - median(fl.values))))
        s.notes.append(f"sgpu ÷ floor: {fmt_ratio(median(base.values) / median(fl.values))}")
    return s
