"""scripts/bench: sgpu against torchrun, mpirun and a hand-started floor.

Writes BENCHMARKS.md (or --out); --quick is the smoke mode that scripts/test
runs: sgpu and the floor only, tiny sizes, a few seconds, exit 1 when sgpu
fails anything.
"""
import argparse
import os
import re
import shutil
import sys
import tempfile
import time

import ddp
import env_sync
import failure
import footprint
import gpu
import hangs
import health_gate
import launch
import multinode
import output
import python_api
import ray_start
import rendezvous
import report
import runs
import sampling
import spares
import stop
import tracking
from peers import ENV_NOTE, Context, base_env

SECTIONS = {
    "launch": launch.run,
    "ddp": ddp.run,
    "failure": failure.run,
    "output": output.run,
    "footprint": footprint.run,
    "rendezvous": rendezvous.run,
    "multinode": multinode.run,
    "python": python_api.run,
    "runs": runs.run,
    "stop": stop.run,
    "tracking": tracking.run,
    "ray": ray_start.run,
    "gpu": gpu.run,
    "hangs": hangs.run,
    "sampling": sampling.run,
    "env_sync": env_sync.run,
    "health_gate": health_gate.run,
    "spares": spares.run,
}

METHOD = """\
Each comparison runs in rounds (3; 5 for output, whose runs vary most; 2 for
footprint, the longest):
a round runs every launcher once (for the launch comparison, one hyperfine
block per launcher), the order rotated by one each round, so a change in the
machine's load falls on every launcher alike. The
table gives the median, the spread (the fastest and the slowest run) and the
number of runs; `÷ sgpu` and `÷ floor` divide the launcher's median by sgpu's
and by the floor's median from the same run. Every run is checked (exit code,
and what the ranks left: marks, losses, the exact lines); a launcher with a
failed run gets no figure, and nothing is divided by it: the cell says why.
The floor is what a shell script gives with no launcher: the ranks started with
`&` and reaped with `wait -n` (bench/floor.sh).

torchrun is Debian 12's (torch 1.13 on Python 3.11), which fails at start as
shipped (`AttributeError: 'NoneType' object has no attribute 'get'` in
`to_map`: `Std.from_str("0")` iterates the IntFlag, and Python 3.11 skips
the 0 and multi-bit members). bench/torchrun_py311.py replaces that one
classmethod with the same parsing done by value, then calls the real,
unchanged `torch.distributed.run.main()`; it runs under /usr/bin/python3 like
/usr/bin/torchrun."""


def contention_note(before, after, cores):
    def avg(text):
        found = re.findall(r"load average ([0-9.]+)", text)
        return max(map(float, found)) if found else 0.0

    peak = max(avg(before), avg(after))
    if peak <= cores:
        return f"The machine was quiet enough: the load average stayed at or below its {cores} cores."
    return (f"**The machine was shared while this ran** (load average up to {peak:.1f} on {cores} cores: other "
            "engineers' builds and tests). Rounds alternate so that the load hits every launcher alike, but the "
            "absolute times are inflated and noisy, most for Python start-up (torchrun, the DDP ranks); the spreads "
            "show how much. Rerun on a quiet machine for cleaner absolute figures.")


def merge(old, new, keys):
    """Replaces the sections (and their summary rows) named by keys in old with those in new."""
    for key in keys:
        for kind in ("summary", "section"):
            pattern = re.compile(rf"<!-- {kind}:{key} -->.*?<!-- /{kind}:{key} -->", re.S)
            fresh = pattern.search(new)
            if fresh and pattern.search(old):
                old = pattern.sub(lambda _: fresh.group(0), old)
            elif fresh and kind == "summary":  # a comparison the old file lacks: its row ends the summary
                at = old.find("\n## Machine")
                if at < 0:
                    return new
                old = old[:at].rstrip("\n") + "\n" + fresh.group(0) + "\n" + old[at:]
            elif fresh:  # and its section ends the file
                old = old.rstrip("\n") + "\n\n" + fresh.group(0) + "\n"
    return old


def main():
    ap = argparse.ArgumentParser(prog="scripts/bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke mode: sgpu and the floor, tiny sizes, no file")
    ap.add_argument("--only", default="", help=f"comma-separated comparisons ({', '.join(SECTIONS)})")
    ap.add_argument("--rounds", type=int, default=0, help="rounds per comparison (default: 3; 5 for output, whose runs vary most; 2 for footprint, the longest; 2 with --quick)")
    ap.add_argument("--output-mib", type=int, default=0,
                    help="total output of the output comparison, MiB (default 1024, 8 with --quick)")
    ap.add_argument("--out", default="", help="where to write the Markdown (default BENCHMARKS.md; none in --quick)")
    ap.add_argument("--sgpu", default="build/apps/sgpu/sgpu", help="the sgpu binary (default %(default)s)")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    keys = [k.strip() for k in args.only.split(",") if k.strip()] or list(SECTIONS)
    unknown = [k for k in keys if k not in SECTIONS]
    if unknown:
        ap.error(f"--only: unknown comparison {unknown[0]!r} (valid: {', '.join(SECTIONS)})")
    if not os.access(os.path.join(root, args.sgpu), os.X_OK):
        ap.error(f"--sgpu: {args.sgpu} is not an executable (build it: scripts/build)")

    work = tempfile.mkdtemp(prefix="sgpu-bench-")
    ctx = Context(root=root, sgpu=args.sgpu, work=work, quick=args.quick,
                  rounds=args.rounds, env=base_env(work),
                  output_mib=args.output_mib or (8 if args.quick else 1024))
    started, t0 = time.strftime("%Y-%m-%d %H:%M %Z"), time.monotonic()
    info, vers = report.machine(), report.versions(args.sgpu, root)
    sections = []
    try:
        for key in keys:
            ctx.log(f"{key}: start")
            before = report.load()
            s = SECTIONS[key](ctx)
            if not s.skipped and not s.measured:  # a recorded section (gpu) says when it was measured
                s.measured = f"{time.strftime('%Y-%m-%d %H:%M %Z')}, sgpu at {vers['sgpu'].split(' ')[0]}"
                s.load_before, s.load_after = before, report.load()
            sections.append(s)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    loads = " ".join(f"{s.load_before} {s.load_after}" for s in sections)
    env_note = ENV_NOTE + " " + contention_note(loads, report.load(), os.cpu_count())
    doc = report.document(sections, info, vers, env_note, METHOD, started, time.monotonic() - t0,
                          ["scripts/bench", *sys.argv[1:]])
    out = args.out or ("" if args.quick else os.path.join(root, "BENCHMARKS.md"))
    if out:
        if args.only and os.path.exists(out):
            with open(out) as f:
                doc = merge(f.read(), doc, keys)
        with open(out, "w") as f:
            f.write(doc)
        ctx.log(f"wrote {out}")
    else:
        print("\n\n".join(s.compact() for s in sections))

    failed = [(s.title, s.sgpu_failure) for s in sections if s.sgpu_failure]
    for title, why in failed:
        print(f"bench: FAIL: {title}: {why}", file=sys.stderr)
    if not failed:
        print(f"bench: PASS: sgpu ran every comparison ({', '.join(keys)})", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
