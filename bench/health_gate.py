"""15. The health gate (--health-gate) on 8 GPUs, and a restart that replaces one.

This machine has no GPU: the GPUs are the project's fake driver
(tests/fake_gpu: libcuda and libnvidia-ml answering from SGPU_FAKE_DRIVER_*),
so the figures are sgpu's own cost around NVML's calls, not NVML's (a real
nvmlInit takes tens of milliseconds more; scripts/gpu-check measures it on a
GPU machine). Two figures:
- a launch of 8 ranks of /bin/true on 8 GPUs, the gate on (the default) and
  off, as a whole process;
- a restart: attempt 0 fails (rank 0 exits 1), attempt 1 starts. The time
  from attempt 0's last rank_exited to attempt 1's first rank_started
  (events.jsonl, millisecond stamps), for a plain restart (the gate off) and
  for one where rank 0 first broke GPU 1 (uncorrectable ECC errors, read by
  the gate before the restart), so that attempt 1 runs on a spare GPU
  (9 GPUs, --gpus 8). --restart-backoff 1ms (its least) in both.

    /usr/bin/python3 bench/health_gate.py [--runs N]   # standalone
    scripts/bench --only health_gate                    # section 15 of BENCHMARKS.md
"""
import argparse
import datetime
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import time

from harness import Peer, Row, median, rotated
from report import Section, fmt_seconds

ROOT = pathlib.Path(__file__).resolve().parents[1]
BREAK = ('if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
         '[ "$RANK" = 0 ] && [ -n "$ECC_FILE" ] && echo 1:2 > "$ECC_FILE"; exit 1; fi')


def fake_env(sgpu, work, gpus):
    libs = pathlib.Path(os.environ.get("SGPU_FAKE_GPU_LIBS", pathlib.Path(sgpu).resolve().parents[2] / "tests" /
                                       "fake_gpu"))
    if not (libs / "nvml" / "libnvidia-ml.so.1").exists():
        return None, f"{libs}/nvml/libnvidia-ml.so.1 is missing: build the tests (scripts/build)"
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "SGPU_FAKE_GPUS")}
    env.update(LD_LIBRARY_PATH=f"{libs / 'cuda'}:{libs / 'nvml'}", SGPU_FAKE_DRIVER_GPUS=str(gpus),
               SGPU_HOME=str(work / "home"))
    return env, ""


def stamp(event):
    return datetime.datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def restart_gap(home):
    """Seconds from attempt 0's last rank_exited to attempt 1's first rank_started, and the run's exclusions."""
    run = max((home / "runs").glob("*/events.jsonl"), key=lambda p: p.stat().st_mtime)
    events = [json.loads(line) for line in run.read_text().splitlines()]
    ended = max(stamp(e) for e in events if e["event"] == "rank_exited" and e["attempt"] == 0)
    started = min(stamp(e) for e in events if e["event"] == "rank_started" and e["attempt"] == 1)
    return started - ended, [e for e in events if e["event"] == "excluded"]


def measure(sgpu, runs, log=lambda msg: None):
    work = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"sgpu-bench-gate-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        env, why = fake_env(sgpu, work, 8)
        start = [Row(Peer("gate off", [sgpu, "launch", "--gpus", "8", "--health-gate", "off", "--no-python", "true"],
                          "sgpu", note="8 ranks of /bin/true on 8 GPUs")),
                 Row(Peer("gate on (default)", [sgpu, "launch", "--gpus", "8", "--no-python", "true"],
                          note="the same, the 8 GPUs read through NVML first"))]
        base = [sgpu, "launch", "--gpus", "8", "--max-restarts", "1", "--restart-backoff", "1ms", "--no-python",
                "/bin/sh", "-c", BREAK]
        restart = [Row(Peer("plain restart (gate off)", base[:2] + ["--health-gate", "off"] + base[2:], "sgpu",
                            note="attempt 1 on the same 8 GPUs")),
                   Row(Peer("restart on a spare GPU (gate on)", base, note="GPU 1 left out, GPU 8 takes its place"))]
        if why:
            for row in start + restart:
                row.fail(why)
            return start, restart
        ecc = work / "ecc"
        for i in range(runs + 1):  # the first round warms the page cache and is not counted
            for row in rotated(start, i):
                t0 = time.monotonic()
                res = subprocess.run(row.peer.argv, env=env, capture_output=True, text=True, timeout=60)
                seconds = time.monotonic() - t0
                if res.returncode != 0:
                    row.fail(f"exit {res.returncode}: {res.stderr.strip()[-200:]}")
                elif i > 0:
                    row.values.append(seconds)
            for row in rotated(restart, i):
                ecc.write_text("")
                spare = row is restart[1]
                run_env, _ = fake_env(sgpu, work, 9 if spare else 8)
                run_env.update(SGPU_FAKE_DRIVER_ECC_FILE=str(ecc), ECC_FILE=str(ecc) if spare else "")
                res = subprocess.run(row.peer.argv, env=run_env, capture_output=True, text=True, timeout=60)
                if res.returncode != 0:
                    row.fail(f"exit {res.returncode}: {res.stderr.strip()[-200:]}")
                    continue
                gap, excluded = restart_gap(work / "home")
                if spare and [e["gpu"] for e in excluded] != [1]:
                    row.fail(f"GPU 1 was not left out: {excluded}")
                elif i > 0:
                    row.values.append(gap)
            log(f"health_gate: round {i}/{runs}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return start, restart


def table_of(rows, what):
    table = [[what, "median", "spread (min - max)", "runs", "more than the first", "what"]]
    for row in rows:
        if not row.ok:
            table.append([row.peer.name, "FAILED", row.failure[:80], "-", "-", row.peer.note])
            continue
        more = (f"{(median(row.values) - median(rows[0].values)) * 1000:+.1f} ms" if rows[0].ok and row is not rows[0]
                else "-")
        table.append([row.peer.name, fmt_seconds(median(row.values)),
                      f"{fmt_seconds(min(row.values))} - {fmt_seconds(max(row.values))}", str(len(row.values)), more,
                      row.peer.note])
    return table


def run(ctx):
    s = Section("health_gate", "15. The health gate on 8 GPUs, and a restart on a spare GPU")
    s.intro = ("The cost of `--health-gate` (on by default) at a launch of 8 ranks on 8 GPUs, and the time from a "
               "failed attempt to the next one's first rank, plain or with a GPU left out and a spare taking its "
               "place. The GPUs are the project's fake driver (this machine has none): the figures are sgpu's work "
               "around NVML's calls; a real nvmlInit adds tens of milliseconds (scripts/gpu-check). Aim (issue 32): "
               "the gate under 2 s when healthy.")
    runs = ctx.rounds or (2 if ctx.quick else 10)
    start, restart = measure(ctx.sgpu, runs, log=ctx.log)
    s.table = table_of(start, "launch")
    s.more_tables.append(("A restart: attempt 0's last exit to attempt 1's first start (events.jsonl)",
                          table_of(restart, "restart")))
    s.commands = [shlex.join(r.peer.argv) for r in start + restart]
    s.notes.append(f"{runs} rounds after one uncounted, the order rotated each round. The restart's job: "
                   f"`{BREAK}` (rank 0 writes GPU 1's ECC count into the fake driver's file first when a spare is "
                   "measured). Environment: LD_LIBRARY_PATH to tests/fake_gpu's libcuda and libnvidia-ml, "
                   "SGPU_FAKE_DRIVER_GPUS=8 (9 for the spare).")
    failed = next((r for r in start + restart if not r.ok), None)
    if failed:
        s.sgpu_failure = f"{failed.peer.name}: {failed.failure}"
        return s
    s.headline.append(("health gate on 8 (fake) GPUs, more per launch",
                       f"{(median(start[1].values) - median(start[0].values)) * 1000:+.1f} ms (aim: under 2 s)"))
    s.headline.append(("restart on a spare GPU, more than a plain restart",
                       f"{(median(restart[1].values) - median(restart[0].values)) * 1000:+.1f} ms"))
    return s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--sgpu", default=str(ROOT / "build" / "apps" / "sgpu" / "sgpu"))
    args = parser.parse_args()
    start, restart = measure(args.sgpu, args.runs, log=print)
    for caption, rows in (("launch", start), ("restart", restart)):
        for row in table_of(rows, caption):
            print("  ".join(row))


if __name__ == "__main__":
    main()
