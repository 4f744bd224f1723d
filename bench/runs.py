"""9. Run listing: `sgpu runs` over 10,000 run directories.

The directories are copies of real runs (a 4-rank run that succeeded and one
whose rank failed, made by the real binary first): every file hard-linked but
state.json, which gets each copy's own id. One in a hundred is a lost run
(state "running", nobody holds its lock), so the lock is checked as it is in
use. Measured: `sgpu runs` (the newest 20), `sgpu runs --all -o json` (every
run, checked to list them all) and `sgpu status` of the oldest run by a unique
prefix, each after one warm-up run: wall-clock time of the whole process, and
its CPU time (user+system), which a loaded machine does not inflate.
Issue 16's aim: `sgpu runs` under 200 ms.

Also runnable alone: python3 bench/runs.py [SGPU] [RUNS].
"""
import json
import os
import resource
import shutil
import subprocess
import sys
import time

from harness import median, spread
from report import Section, fmt_seconds, shell

RUNS, QUICK_RUNS = 10_000, 1_000
AIM_SECONDS = 0.2


def make_runs(sgpu, env, home, count, log=print):
    runs_dir = os.path.join(home, "runs")
    env = dict(env, SGPU_HOME=home, SGPU_KEEP_RUNS="0")
    seeds = []
    for args in (["--nproc", "4", "--no-python", "true"], ["--nproc", "4", "--no-python", "sh", "-c", "exit $RANK"]):
        out = subprocess.run([sgpu, "launch", "-o", "json", *args], env=env, capture_output=True, text=True)
        seeds.append(json.loads(out.stdout)["run_id"])
    t0 = time.monotonic()
    for i in range(count):
        seed = seeds[i % 2]
        run_id = f"2026{(i // 86400) % 12 + 1:02d}{(i // 3600) % 28 + 1:02d}-{(i // 60) % 24:02d}{i % 60:02d}00-{i:06x}"
        src, dst = os.path.join(runs_dir, seed), os.path.join(runs_dir, run_id)
        shutil.copytree(src, dst, copy_function=os.link, ignore=shutil.ignore_patterns("state.json"))
        with open(os.path.join(src, "state.json")) as f:
            state = json.load(f)
        state["run_id"] = run_id
        if i % 100 == 7:  # lost: recorded running, its lock free
            state["state"] = "running"
            for key in ("exit_code", "ended_at", "duration_s"):
                state.pop(key, None)
        with open(os.path.join(dst, "state.json"), "w") as f:
            json.dump(state, f)
    for seed in seeds:
        shutil.rmtree(os.path.join(runs_dir, seed))
    log(f"runs: {count} run directories in {time.monotonic() - t0:.1f} s")
    return runs_dir


def timed(argv, env, check):
    """Wall-clock time of the whole process, and its CPU time (user+system), which load does not inflate."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run(argv, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode != 0:
        raise RuntimeError(f"{shell(argv)} exited {out.returncode}: {out.stderr.strip()[-300:]}")
    check(out.stdout)
    return elapsed, cpu


def measure(sgpu, env, home, count, rounds):
    env = dict(env, SGPU_HOME=home)
    oldest = sorted(os.listdir(os.path.join(home, "runs")))[0]

    def listed_all(stdout):
        if len(json.loads(stdout)) != count:
            raise RuntimeError(f"runs --all listed {len(json.loads(stdout))} of {count}")

    def listed_20(stdout):
        if len(stdout.splitlines()) != 21:
            raise RuntimeError(f"runs printed {len(stdout.splitlines())} lines, not a header and 20 runs")

    def found_oldest(stdout):
        if json.loads(stdout)["run_id"] != oldest:
            raise RuntimeError("status found another run")

    cases = [("sgpu runs", [sgpu, "runs"], listed_20),
             ("sgpu runs --all -o json", [sgpu, "runs", "--all", "-o", "json"], listed_all),
             ("sgpu status PREFIX -o json", [sgpu, "status", oldest[:-1], "-o", "json"], found_oldest)]
    results = {name: [] for name, _, _ in cases}
    for name, argv, check in cases:
        timed(argv, env, check)  # warm-up: the page cache holds the directories afterwards
    for _ in range(rounds):
        for name, argv, check in cases:
            results[name].append(timed(argv, env, check))
    return cases, results


def run(ctx):
    count = QUICK_RUNS if ctx.quick else RUNS
    rounds = ctx.rounds_for(5)
    s = Section("runs", f"9. Run listing: `sgpu runs` over {count:,} run directories")
    s.intro = __doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0].replace("\n", " ")
    home = ctx.scratch("runs-home")
    try:
        make_runs(ctx.sgpu, ctx.env, home, count, ctx.log)
        cases, results = measure(ctx.sgpu, ctx.env, home, count, rounds)
    except (RuntimeError, ValueError, OSError) as e:
        s.skipped = f"sgpu failed: {e}"
        s.sgpu_failure = s.skipped
        return s
    finally:
        shutil.rmtree(home, ignore_errors=True)
    s.table = [["command", "median", "spread (min - max)", "runs", "CPU, median"]]
    for name, _, _ in cases:
        walls = [w for w, _ in results[name]]
        lo, hi = spread(walls)
        s.table.append([name, fmt_seconds(median(walls)), f"{fmt_seconds(lo)} - {fmt_seconds(hi)}", str(len(walls)),
                        fmt_seconds(median([c for _, c in results[name]]))])
    m = median([w for w, _ in results["sgpu runs"]])
    verdict = "PASS" if m < AIM_SECONDS else "FAIL"
    if count == RUNS:
        s.headline.append((f"`sgpu runs` over {count:,} runs", f"{fmt_seconds(m)}, {verdict} (aim: under 200 ms)"))
        s.notes.append(f"Issue 16's aim, `sgpu runs` over {count:,} run directories under 200 ms: **{verdict}**.")
        if verdict == "FAIL":
            s.sgpu_failure = f"sgpu runs took {fmt_seconds(m)} over {count:,} runs (aim: under 200 ms)"
    s.commands = [shell(argv) for _, argv, _ in cases]
    return s


if __name__ == "__main__":
    sgpu = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/apps/sgpu/sgpu")
    count = int(sys.argv[2]) if len(sys.argv) > 2 else RUNS
    home = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"sgpu-bench-runs-{os.getpid()}")
    try:
        make_runs(sgpu, dict(os.environ), home, count)
        cases, results = measure(sgpu, dict(os.environ), home, count, 5)
        for name, _, _ in cases:
            walls = [w for w, _ in results[name]]
            print(f"{name}: median {fmt_seconds(median(walls))}, spread {' - '.join(map(fmt_seconds, spread(walls)))}, "
                  f"CPU median {fmt_seconds(median([c for _, c in results[name]]))}")
    finally:
        shutil.rmtree(home, ignore_errors=True)
