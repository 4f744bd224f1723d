"""5. Footprint: the launcher's memory and CPU while 8 ranks sleep."""
import os
import time

from harness import Row, descendants, median, run_once, tail, describe_exit
from peers import alternate, launchers, missing_tools
from report import Section, fmt_kib, fmt_ratio, shell, timing_table

N = 8


def proc_info(pid):
    """(comm, VmHWM KiB, Pss KiB, CPU seconds) of one process, or None once it is gone.

    VmHWM is the peak RSS, which counts pages shared with another process (a
    forked helper, shared libraries) in each; Pss splits them fairly but has no
    peak. CPU time is the sum over its threads of /proc/PID/task/TID/schedstat
    (ns); /proc/PID/stat counts in 10 ms ticks, too coarse for an idle launcher.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/smaps_rollup") as f:
            pss = next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
        cpu_ns = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                cpu_ns += int(f.read().split()[0])
    except (OSError, ValueError):
        return None
    comm = stat[stat.index("(") + 1:stat.rindex(")")]
    return comm, int(status.get("VmHWM", "0 kB").split()[0]), pss, cpu_ns / 1e9


def sample(pid):
    """The launcher's processes (the tree minus the `sleep` ranks) at one moment."""
    launcher = {"hwm": 0, "pss": 0, "cpu": 0.0, "procs": 0, "t": time.monotonic()}
    ranks = 0
    for p in [pid, *descendants(pid)]:
        info = proc_info(p)
        if info is None:
            continue
        comm, hwm, pss, cpu = info
        if comm == "sleep":
            ranks += 1
            continue
        launcher["hwm"] += hwm
        launcher["pss"] += pss
        launcher["cpu"] += cpu
        launcher["procs"] += 1
    launcher["ranks"] = ranks
    return launcher


def one_run(ctx, row, seconds, n=N):
    """One run of `n` sleeping ranks: the launcher's peak RSS into row.values, its CPU in row.extra."""
    out, err = os.path.join(ctx.work, "footprint.out"), os.path.join(ctx.work, "footprint.err")
    run = run_once(row.peer.argv, ctx.env, ctx.root, out, err, timeout=float(seconds) + 600, sampler=sample)
    if run.returncode != 0 or run.timed_out:
        row.fail(f"{describe_exit(run.returncode)}: {tail(err)}")
        return
    full = [s for s in run.samples if s["ranks"] == n]
    if not full:
        row.fail(f"never saw {n} sleeping ranks at once")
        return
    row.values.append(max(s["hwm"] for s in full))
    row.extra.setdefault("tree_cpu", []).append(run.cpu)
    row.extra.setdefault("pss", []).append(max(s["pss"] for s in full))
    row.extra.setdefault("procs", set()).add(max(s["procs"] for s in full))
    # CPU the launcher spends while the job merely runs, per second of it.
    span = full[-1]["t"] - full[0]["t"]
    if span > 0:
        row.extra.setdefault("idle_cpu", []).append((full[-1]["cpu"] - full[0]["cpu"]) / span)


def cpu_table(rows):
    """The whole tree's CPU time (wait4: launcher plus 8 sleeps), median, with ratios."""
    cpu_rows = []
    for r in rows:
        c = Row(r.peer, list(r.extra.get("tree_cpu", [])), r.failure)
        cpu_rows.append(c)
    return timing_table(cpu_rows, value_name="CPU time, launcher + ranks")


def run(ctx):
    seconds = "1" if ctx.quick else "10"
    s = Section("footprint", f"5. Footprint: the launcher while 8 ranks sleep {seconds} s")
    s.intro = ("Every 0.2 s the benchmark reads /proc for the launcher's process tree; the ranks (`sleep`) are set "
               "apart. 'Peak RSS' is the sum of VmHWM over the launcher's own processes while all 8 ranks run "
               "(torchrun's Python agent, mpirun, sgpu and its orphan guard, bash): pages two of them share count "
               "twice, so 'Pss' (the largest sum of /proc/PID/smaps_rollup's Pss seen while the ranks ran) is given "
               "too. CPU time comes from wait4 for the whole tree "
               "(launcher plus ranks; 8 sleeps cost about a millisecond in all, the floor shows it). "
               "'Busy while waiting' is the launcher's CPU per second of the run once every rank had started. "
               "(wait4's max RSS is not used: a child forked from the benchmark's Python keeps the parent's "
               "high-water mark from before its exec.)")
    peers = launchers(ctx, N, ["/bin/sleep", seconds])
    rows = [Row(p) for p in peers]
    for row in rows:
        if row.peer in missing_tools(peers):
            row.fail(f"{row.peer.argv[0]} is not installed")
    rounds = 1 if ctx.quick and not ctx.rounds else ctx.rounds_for(2)  # memory hardly varies between runs
    alternate(ctx, "footprint", rows, rounds, lambda row, i: one_run(ctx, row, seconds))
    extra = [
        ("Pss while the ranks run", lambda r: fmt_kib(median(r.extra["pss"])) if r.extra.get("pss") else "-"),
        ("launcher processes", lambda r: ",".join(map(str, sorted(r.extra.get("procs", [])))) or "-"),
        ("busy while waiting", lambda r: f"{median(r.extra['idle_cpu']) * 1e3:.3f} ms CPU/s"
         if r.extra.get("idle_cpu") else "-"),
    ]
    s.table = timing_table(rows, value_name="peak RSS", fmt=fmt_kib, extra_cols=extra)
    cpu = cpu_table(rows)
    s.more_tables.append(("CPU time of the whole run (wait4 user+system: the launcher and its 8 ranks):", cpu))
    s.commands = [shell(r.peer.argv) for r in rows]
    base = rows[0]
    if not base.ok:
        s.sgpu_failure = base.failure
    fl = rows[-1]
    if fl.ok and base.ok:
        s.headline.append(("sgpu ÷ floor (bash), launcher peak RSS", fmt_ratio(median(base.values) / median(fl.values))))
    for r in rows[1:]:
        if r.peer.role == "peer" and r.ok and base.ok:
            s.headline.append((f"{r.peer.name} ÷ sgpu, launcher peak RSS",
                               fmt_ratio(median(r.values) / median(base.values))))
            s.headline.append((f"{r.peer.name} ÷ sgpu, CPU time of an 8-rank 10 s job",
                               fmt_ratio(median(r.extra["tree_cpu"]) / median(base.extra["tree_cpu"]))))
    return s
