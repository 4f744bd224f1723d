"""13. Sampling: what --sample-every costs the launcher while ranks sleep."""
from footprint import one_run
from harness import Peer, Row, median
from peers import alternate, sgpu
from report import Section, fmt_kib, shell, timing_table


def run(ctx):
    seconds = "3" if ctx.quick else "20"
    s = Section("sampling", f"13. Sampling: the launcher while its ranks sleep {seconds} s, sampled or not")
    s.intro = ("The cost of `--sample-every` (each rank's /proc/PID/stat and heartbeat file, the GPUs through NVML, "
               "a line per rank in metrics.jsonl) on the launcher, which on one node is also the node's sampler: its "
               "peak RSS (VmHWM of sgpu and its guard) and its CPU per second of the run once every rank had started "
               "('busy while waiting', from /proc/PID/task/*/schedstat, read every 0.2 s as in the footprint "
               "comparison), and the CPU time of the whole run (wait4: sgpu, its guard and the ranks, from start to end). "
               "The ranks are /bin/sleep: what is measured is sgpu alone. This machine has no GPU, so "
               "NVML is not loaded; on a GPU node each sample adds a few NVML calls per GPU.")
    specs = [("8 ranks, --sample-every off", 8, "off"), ("8 ranks, default (10s)", 8, None),
             ("64 ranks, --sample-every off", 64, "off"), ("64 ranks, --sample-every 1s", 64, "1s")]
    rows = []
    for name, n, every in specs:
        flags = [] if every is None else ["--sample-every", every]
        argv = [*sgpu(ctx, n), *flags, "--no-python", "/bin/sleep", seconds]
        rows.append(Row(Peer(f"sgpu, {name}", argv, "sgpu" if not rows else "peer")))
    n_of = {r.peer.name: spec[1] for r, spec in zip(rows, specs)}
    rounds = 1 if ctx.quick and not ctx.rounds else ctx.rounds_for(2)
    alternate(ctx, "sampling", rows, rounds, lambda row, i: one_run(ctx, row, seconds, n_of[row.peer.name]))
    busy = lambda r: f"{median(r.extra['idle_cpu']) * 1e3:.3f} ms CPU/s" if r.extra.get("idle_cpu") else "-"
    whole = lambda r: f"{median(r.extra['tree_cpu']) * 1e3:.1f} ms" if r.extra.get("tree_cpu") else "-"
    s.table = timing_table(rows, value_name="peak RSS", fmt=fmt_kib,
                           extra_cols=[("busy while waiting", busy), ("CPU time of the run (wait4)", whole)])
    s.commands = [shell(r.peer.argv) for r in rows]
    if not all(r.ok for r in rows):
        s.sgpu_failure = next(r.failure for r in rows if not r.ok)
        return s
    cpu = [median(r.extra.get("idle_cpu", [0.0])) for r in rows]
    rss = [median(r.values) for r in rows]
    s.headline.append(("default sampling ÷ off, 8 ranks: launcher peak RSS", f"{rss[1] / rss[0]:.3f}x"))
    tree = [median(r.extra["tree_cpu"]) for r in rows]
    s.headline.append(("default sampling ÷ off, 8 ranks: CPU time of the whole run", f"{tree[1] / tree[0]:.3f}x"))
    s.headline.append(("default sampling - off, 8 ranks: launcher CPU", f"{(cpu[1] - cpu[0]) * 1e3:+.3f} ms per s"))
    s.headline.append(("--sample-every 1s, 64 ranks: the sampler's CPU", f"{(cpu[3] - cpu[2]) * 100:.2f}% of one core"))
    return s
