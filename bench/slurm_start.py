"""The SLURM half of comparison 7: `sgpu launch` against a plain `srun` of the
same ranks, inside one allocation of 2 nodes of the one-machine cluster of
scripts/slurm-cluster (real slurmctld and slurmd; needs root and slurm-wlm).

Each of the 8 ranks (4 per node) runs `sh -c 'date +%s%N > FILE'`: it writes
the wall clock as it starts. "All running" is the latest stamp minus the time
the launcher was started (same machine, same clock); also the time until the
launcher exits.

  sgpu launch --nproc 4 --no-python sh -c ...   one srun step of `sgpu agent` per node, rendezvous, the ranks
  srun -N2 --ntasks-per-node=4 sh -c ...        SLURM starts the ranks itself: the floor

The two alternate, the order rotated each round, after one unmeasured run of
each (binaries and SLURM's caches). The allocation's inner part is this file
run by `salloc` with --inner; it writes its figures as JSON.

    scripts/bench --only multinode    # section 7 of BENCHMARKS.md (calls measure(ctx))
    scripts/bench-slurm-start [ROUNDS]  # this file, printing a Markdown table
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from harness import Peer, Row, median, rotated  # noqa: E402
from ports import free_port_block  # noqa: E402

NODES, PER_NODE = 2, 4
RANKS = NODES * PER_NODE
RANK_CMD = 'date +%s%N > "$BENCH_DIR/${RANK:-$SLURM_PROCID}"'
SALLOC = ["salloc", f"-N{NODES}", f"--ntasks-per-node={PER_NODE}"]
TOOLS = ("munged", "slurmctld", "slurmd", "salloc", "srun")


def usable():
    """Why the cluster cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (scripts/slurm-cluster runs munged, slurmctld and slurmd as root)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"{', '.join(missing)} not installed (scripts/install-deps installs SLURM)"
    return None


def peers(sgpu):
    return [Peer("sgpu launch", [sgpu, "launch", "--nproc", str(PER_NODE), "--no-python", "sh", "-c", RANK_CMD],
                 "sgpu", note="one srun step of `sgpu agent` per node, the rendezvous, then the ranks"),
            Peer("srun", ["srun", f"-N{NODES}", f"--ntasks-per-node={PER_NODE}", "sh", "-c", RANK_CMD], "floor",
                 note="SLURM starts the ranks itself")]


def once(argv, env):
    """(seconds to all ranks running, seconds to exit, "") or (None, None, why)."""
    with tempfile.TemporaryDirectory() as d:
        env = dict(env, BENCH_DIR=d)
        t0 = time.time_ns()
        try:
            p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return None, None, "no exit within 120 s"
        t_exit = time.time_ns()
        stamps = [int(f.read_text()) for f in pathlib.Path(d).iterdir()]
        if p.returncode != 0 or len(stamps) != RANKS:
            return None, None, f"exit {p.returncode}, {len(stamps)} of {RANKS} ranks ran: {p.stderr.strip()[-300:]}"
        return (max(stamps) - t0) / 1e9, (t_exit - t0) / 1e9, ""


def inner(sgpu, rounds, warm, out):
    """Inside the allocation: every peer `rounds` times, alternating; the figures into `out` as JSON."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.setdefault("SGPU_HOME", tempfile.mkdtemp(prefix="sgpu-bench-home-"))
    res = {p.name: {"running": [], "exit": [], "failure": ""} for p in peers(sgpu)}
    argv = {p.name: p.argv for p in peers(sgpu)}
    if warm:  # not counted: binaries and SLURM's caches
        for name in argv:
            _, _, why = once(argv[name], env)
            res[name]["failure"] = f"warm-up run: {why}" if why else ""
    for i in range(rounds):
        for name in rotated(list(argv), i):
            if res[name]["failure"]:
                continue
            running, end, why = once(argv[name], env)
            if why:
                res[name]["failure"] = why
            else:
                res[name]["running"].append(running)
                res[name]["exit"].append(end)
    pathlib.Path(out).write_text(json.dumps({"job": os.environ.get("SLURM_JOB_ID", "?"), "peers": res}))


def run(sgpu, rounds, warm=True, env=None, cwd=None, log=lambda msg: None):
    """Starts a 2-node cluster (unless env's SLURM_CONF names a running one), runs inner in an allocation.

    Returns (figures as inner wrote them, "") or (None, why the cluster or the allocation failed)."""
    env = {k: v for k, v in (env or os.environ).items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
    state, started = None, False
    if "SLURM_CONF" not in env:
        state = tempfile.mkdtemp(prefix="sgpu-bench-slurm-")
        env.update(SGPU_SLURM_DIR=state, SGPU_SLURM_PORT=str(free_port_block(NODES + 1)),
                   SGPU_SLURM_NODES=str(NODES), SLURM_CONF=f"{state}/slurm.conf")
        log("SLURM: starting a 2-node cluster (scripts/slurm-cluster)")
        p = subprocess.run([str(ROOT / "scripts/slurm-cluster"), "start"], env=env, capture_output=True, text=True,
                           timeout=600)
        if p.returncode != 0:
            shutil.rmtree(state, ignore_errors=True)
            return None, f"scripts/slurm-cluster start failed: {p.stderr.strip()[-300:]}"
        started = True
    try:
        out = os.path.join(tempfile.mkdtemp(prefix="sgpu-bench-slurm-out-"), "figures.json")
        sgpu = os.path.abspath(os.path.join(cwd or ".", sgpu))
        argv = [*SALLOC, sys.executable, os.path.abspath(__file__), "--inner", sgpu, str(rounds), "1" if warm else "0",
                out]
        log(f"SLURM: {rounds} rounds inside `{' '.join(SALLOC)}`")
        try:
            p = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=60 + rounds * 60)
        except subprocess.TimeoutExpired:
            return None, f"{' '.join(SALLOC)}: no exit within {60 + rounds * 60} s"
        if p.returncode != 0 or not os.path.exists(out):
            return None, f"{' '.join(SALLOC)} failed (exit {p.returncode}): {p.stderr.strip()[-300:]}"
        figures = json.loads(pathlib.Path(out).read_text())
        shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        return figures, ""
    finally:
        if started:
            subprocess.run([str(ROOT / "scripts/slurm-cluster"), "stop"], env=env, capture_output=True, timeout=120)
            shutil.rmtree(state, ignore_errors=True)


def rows(sgpu, figures, key):
    """harness rows of one figure ("running" or "exit") for report.timing_table."""
    out = []
    for p in peers(sgpu):
        r = Row(p, values=list(figures["peers"][p.name][key]))
        if figures["peers"][p.name]["failure"]:
            r.fail(figures["peers"][p.name]["failure"])
        out.append(r)
    return out


def measure(ctx):
    """Section 7's SLURM half (bench/multinode.py): a report.Section of tables, notes and headline."""
    from report import Section, fmt_ratio, shell, timing_table
    s = Section("slurm", "SLURM start")
    why = usable()
    if why:
        s.skipped = why
        return s
    rounds = ctx.rounds or (1 if ctx.quick else 15)
    warm = not ctx.quick
    figures, why = run(ctx.sgpu, rounds, warm=warm, env=ctx.env, cwd=ctx.root, log=ctx.log)
    if figures is None:
        s.skipped = why
        return s
    running, ended = rows(ctx.sgpu, figures, "running"), rows(ctx.sgpu, figures, "exit")
    what = lambda r: r.peer.note  # noqa: E731
    s.intro = f"Inside SLURM ({RANKS} ranks, {NODES} nodes x {PER_NODE}, one allocation): start to all ranks running:"
    s.table = timing_table(running, extra_cols=[("what", what)])
    s.more_tables.append(("Inside SLURM: start to launcher exit:", timing_table(ended)))
    s.notes.append(f"{rounds} rounds inside one `{' '.join(SALLOC)}` (job {figures['job']}) of the cluster of "
                   f"`scripts/slurm-cluster` with {NODES} nodes (real slurmctld and slurmd on this machine), each "
                   "round running both in a rotated order" + ("" if not warm else ", after one unmeasured run of "
                                                               "each") + ". Each rank writes the wall clock as it "
                   "starts (`date +%s%N`); all running is the latest of them minus the launcher's start (one "
                   "machine, one clock). srun is the floor: SLURM starting the ranks itself, with no rendezvous "
                   "and no torchrun environment.")
    s.commands += [f"# inside {' '.join(SALLOC)} (SLURM_CONF of scripts/slurm-cluster, SGPU_SLURM_NODES={NODES})",
                   *[shell(p.argv) for p in peers(ctx.sgpu)]]
    for r in running + ended:
        if not r.ok and r.peer.role == "sgpu":
            s.sgpu_failure = s.sgpu_failure or f"sgpu launch: {r.failure}"
    for label, rs in (("start to all ranks running", running), ("start to exit", ended)):
        base, floor = rs
        text = (fmt_ratio(median(base.values) / median(floor.values)) if base.ok and floor.ok
                else f"no ratio: {(base if not base.ok else floor).peer.name} failed")
        s.headline.append((f"SLURM, sgpu ÷ srun, {RANKS} ranks on {NODES} nodes, {label}", text))
    return s


def main(argv):
    if argv[:1] == ["--inner"]:
        sgpu, rounds, warm, out = argv[1:5]
        return inner(sgpu, int(rounds), warm == "1", out)
    rounds = int(argv[0]) if argv else 5
    why = usable()
    if why:
        sys.exit(f"bench-slurm-start: {why}")
    sgpu = os.environ.get("SGPU_BIN", str(ROOT / "build/apps/sgpu/sgpu"))
    figures, why = run(sgpu, rounds)
    if figures is None:
        sys.exit(f"bench-slurm-start: {why}")
    failed = [f"{name} failed: {r['failure']}" for name, r in figures["peers"].items() if r["failure"]]
    if failed:
        sys.exit("bench-slurm-start: " + "; ".join(failed))
    res = figures["peers"]
    med = {name: (median(r["running"]) * 1000, median(r["exit"]) * 1000) for name, r in res.items()}
    print(f"{RANKS} ranks ({NODES} nodes x {PER_NODE}) inside SLURM job {figures['job']}, {rounds} runs each, "
          "alternating; medians (min-max) in ms\n")
    print("| launcher | start to all ranks running | start to launcher exit |")
    print("| --- | --- | --- |")
    for name, r in res.items():
        run_ms = [v * 1000 for v in r["running"]]
        end_ms = [v * 1000 for v in r["exit"]]
        print(f"| {name} | {med[name][0]:.0f} ({min(run_ms):.0f}-{max(run_ms):.0f}) | "
              f"{med[name][1]:.0f} ({min(end_ms):.0f}-{max(end_ms):.0f}) |")
    print(f"\nsgpu launch / srun: {med['sgpu launch'][0] / med['srun'][0]:.2f}x to all ranks running, "
          f"{med['sgpu launch'][1] / med['srun'][1]:.2f}x to exit")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
