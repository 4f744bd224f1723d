"""3. Failure: rank 0 exits 3 at once, the others sleep; how fast and how honestly
does each launcher give up?"""
import os
import time

from harness import median, run_once, tail, describe_exit
from peers import alternate, launchers, missing_tools, rows_for
from report import Section, fmt_ratio, fmt_seconds, shell, timing_table

N = 8


def sleepers(seconds):
    """pids of ranks still sleeping: their argv is exactly `sleep <seconds>`, which nothing else uses."""
    wanted = b"sleep\0" + seconds.encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if cmd == wanted and state != "Z":
            found.append(int(entry))
    return found


def one_run(ctx, row, sleep_s):
    stamp = os.path.join(ctx.work, "rank0-exit")
    if os.path.exists(stamp):
        os.remove(stamp)
    env = dict(ctx.env, BENCH_STAMP=stamp)
    out, err = os.path.join(ctx.work, "fail.out"), os.path.join(ctx.work, "fail.err")
    run = run_once(row.peer.argv, env, ctx.root, out, err, timeout=float(sleep_s) * 3 + 300)
    left_at_exit = sleepers(sleep_s)
    left = []
    if left_at_exit:
        time.sleep(1)  # a benchmark, not the product: give SIGTERMed ranks a second before calling them left behind
        left = sleepers(sleep_s)
    for pid in left:
        os.kill(pid, 9)
    if run.timed_out:
        row.fail("timed out")
        return
    if not os.path.exists(stamp):
        row.fail(f"rank 0 never ran ({describe_exit(run.returncode)}): {tail(err)}")
        return
    with open(stamp) as f:
        rank0_exit = float(f.read())
    row.values.append(run.ended - rank0_exit)
    row.extra.setdefault("codes", set()).add(run.returncode)
    row.extra.setdefault("walls", []).append(run.wall)
    row.extra["left_at_exit"] = max(row.extra.get("left_at_exit", 0), len(left_at_exit))
    row.extra["left"] = max(row.extra.get("left", 0), len(left))


def run(ctx):
    s = Section("failure", "3. Failure: rank 0 exits 3 at once, 7 ranks sleep")
    sleep_s = "4.5" if ctx.quick else "29.5"
    s.intro = ("Rank 0 writes the time and exits 3 as soon as it starts; ranks 1-7 `sleep " + sleep_s + "`. "
               "The figure is the time from rank 0's exit until the launcher has exited (the launcher's reaction, "
               "without its start-up); the table also gives the whole run and the exit code each launcher returns. "
               "A run counts only if rank 0 really ran. 'Left running' counts sleeping ranks still alive when the "
               "launcher had exited, and one second later (the benchmark then kills them).")
    rows = rows_for(launchers(ctx, N, ["bench/ranks.sh", "fail", sleep_s]))
    for row in rows:
        if row.peer in missing_tools([r.peer for r in rows]):
            row.fail(f"{row.peer.argv[0]} is not installed")
    alternate(ctx, "failure", rows, ctx.rounds_for(3), lambda row, i: one_run(ctx, row, sleep_s))
    extra = [
        ("exit code", lambda r: ", ".join(map(str, sorted(r.extra.get("codes", [])))) or "-"),
        ("whole run (median)", lambda r: fmt_seconds(median(r.extra["walls"])) if r.extra.get("walls") else "-"),
        ("left running at exit / 1 s later", lambda r: f"{r.extra.get('left_at_exit', '-')} / {r.extra.get('left', '-')}"),
    ]
    s.table = timing_table(rows, value_name="rank 0 exit -> launcher exit", extra_cols=extra)
    s.commands = [shell(r.peer.argv, {"BENCH_STAMP": "<file>"}) for r in rows]
    base = rows[0]
    if not base.ok:
        s.sgpu_failure = base.failure
    elif base.extra["codes"] != {3}:
        s.sgpu_failure = f"sgpu returned {sorted(base.extra['codes'])}, expected 3 (rank 0's code)"
    elif base.extra["left"]:
        s.sgpu_failure = f"sgpu left {base.extra['left']} ranks running"
    fl = rows[-1]
    if fl.ok and base.ok:
        s.headline.append(("sgpu ÷ floor, rank 0's failure to launcher exit", fmt_ratio(median(base.values) /
                                                                                     median(fl.values))))
    for r in rows[1:]:
        if r.peer.role == "peer" and r.ok and base.ok:
            codes = lambda row: "/".join(map(str, sorted(row.extra["codes"])))  # noqa: E731
            s.headline.append((f"{r.peer.name} ÷ sgpu, rank 0's failure to launcher exit "
                               f"(sgpu exits {codes(base)}, {r.peer.name} {codes(r)})",
                               fmt_ratio(median(r.values) / median(base.values))))
    return s
