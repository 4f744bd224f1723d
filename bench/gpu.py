"""12. GPU: sgpu on a real NVIDIA GPU, and against torchrun on a real NCCL job.

scripts/gpu-check runs sgpu's GPU paths with real CUDA, NVML and NCCL:
`sgpu devices`, `sgpu doctor` (NVML health and an NCCL all-reduce from 8 B
to 1 GiB), `launch --preflight` and `--preflight-only`, a PyTorch job on NCCL
(examples/nccl_allreduce.py) under sgpu and under torchrun, and the errors for
a GPU type or count that is not there. It then times that PyTorch job from
start to exit, sgpu and torchrun alternating. On a machine with a GPU this
section runs it; on one without (this project's CI and build machine), it
shows the record the last GPU run kept in bench/gpu-record/ (made by
scripts/gpu-check; machine.txt says where, when and at which commit), and
says so.
"""
import json
import os
import shutil
import statistics
import subprocess

from report import Section, fmt_ratio, fmt_seconds

RECORD = os.path.join("bench", "gpu-record")
SIZES_SHOWN = {8, 1 << 20, 64 << 20, 1 << 30}


def _read(folder, name):
    try:
        with open(os.path.join(folder, name)) as f:
            return f.read()
    except OSError:
        return ""


def _fmt_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def has_gpu(ctx):
    out = subprocess.run([ctx.sgpu, "devices", "-o", "json"], cwd=ctx.root, env=ctx.env,
                         capture_output=True, text=True)
    try:
        return out.returncode == 0 and len(json.loads(out.stdout)) > 0
    except ValueError:
        return False


def steps(summary):
    """scripts/gpu-check's step lines: (name, exit code, seconds, command)."""
    rows = []
    for line in summary.splitlines():
        parts = line.split(None, 4)
        if len(parts) == 5 and parts[1] == "exit" and parts[3].endswith("s"):
            rows.append((parts[0], int(parts[2]), float(parts[3][:-1]), parts[4]))
    return rows


def timings(text):
    runs = {}
    for line in text.splitlines():
        who, rc, seconds = line.split()
        runs.setdefault(who, []).append((int(rc), float(seconds)))
    return runs


def render(s, folder, machine):
    summary = _read(folder, "summary.txt")
    rows = steps(summary)
    if not rows:
        s.skipped = f"no scripts/gpu-check output in {folder}"
        return s
    s.more_tables.append((f"Each command of scripts/gpu-check, once ({machine}):",
                          [["step", "exit", "wall time", "command"]] +
                          [[name, str(rc), fmt_seconds(sec), f"`{cmd}`"] for name, rc, sec, cmd in rows]))
    doctor = json.loads(_read(folder, "doctor-json.out") or "{}")
    sizes = doctor.get("allreduce", {}).get("sizes", [])
    if sizes:
        table = [["size", "time (us)", "algbw GB/s", "busbw GB/s"]]
        table += [[_fmt_bytes(z["bytes"]), f"{z['time_us']:.1f}", f"{z['algbw_gbps']:.2f}", f"{z['busbw_gbps']:.2f}"]
                  for z in sizes if z["bytes"] in SIZES_SHOWN]
        gpus = doctor.get("gpus", [])
        what = ", ".join(f"GPU {g['index']} {g['name']} ({g['verdict']['verdict']})" for g in gpus)
        s.more_tables.append((f"`sgpu doctor`: **{doctor.get('status')}** in {doctor.get('duration_s', 0):.1f} s, "
                              f"NCCL {doctor.get('nccl_version')}, {what}; the all-reduce at four of its sizes "
                              "(one GPU: busbw is 0 by definition, algbw is the GPU's own copy):", table))
    runs = timings(_read(folder, "timing-runs.txt"))
    if {"sgpu", "torchrun"} <= runs.keys():
        med = {w: statistics.median(t for _, t in r) for w, r in runs.items()}
        failed = {w for w, r in runs.items() if any(rc != 0 for rc, _ in r)}
        s.table = [["launcher", "median", "spread (min - max)", "runs", "÷ sgpu"]]
        for who in ("sgpu", "torchrun"):
            ts = [t for _, t in runs[who]]
            s.table.append([who, fmt_seconds(med[who]), f"{fmt_seconds(min(ts))} - {fmt_seconds(max(ts))}",
                            str(len(ts)), "1" if who == "sgpu" else
                            ("failed" if failed else fmt_ratio(med[who] / med["sgpu"]))])
        if not failed:
            s.headline.append(("torchrun ÷ sgpu, a 1-GPU PyTorch NCCL job end to end",
                               fmt_ratio(med["torchrun"] / med["sgpu"])))
    preflight = next((line for line in _read(folder, "preflight.err").splitlines()
                      if line.startswith("sgpu: preflight:")), "")
    if preflight:
        s.headline.append(("`--preflight` on the job's GPU", preflight.removeprefix("sgpu: preflight: ")))
    bad = [name for name, rc, _, _ in rows if rc != 0 and name not in ("gpu-type-other", "gpus-too-many")]
    s.notes.append("Every step exited as it should (0, and 2 for the GPU type and the GPU count that are not there)."
                   if not bad else f"Steps that failed: {', '.join(bad)}.")
    return s


def run(ctx):
    s = Section("gpu", "12. GPU: sgpu on a real NVIDIA GPU, and torchrun on the same NCCL job")
    s.intro = " ".join(__doc__.split("\n\n", 1)[1].split())
    if not ctx.quick and has_gpu(ctx):
        folder = ctx.scratch("gpu-check")
        env = dict(ctx.env, SGPU_BIN=ctx.sgpu)
        with open(os.path.join(folder + ".txt"), "w") as summary:
            subprocess.run(["scripts/gpu-check", folder], cwd=ctx.root, env=env, stdout=summary, check=False)
        shutil.move(folder + ".txt", os.path.join(folder, "summary.txt"))
        s.commands = [f"SGPU_BIN={ctx.sgpu} scripts/gpu-check {folder} > {folder}/summary.txt"]
        s.notes.append(f"Keep this run as the record for machines without a GPU: copy {folder} to {RECORD}/ "
                       "with a machine.txt.")
        return render(s, folder, "this machine")
    folder = os.path.join(ctx.root, RECORD)
    machine = {k.strip(): v.strip() for k, v in
               (line.split(":", 1) for line in _read(folder, "machine.txt").splitlines() if ":" in line)}
    if not machine:
        s.skipped = f"this machine has no GPU and {RECORD}/machine.txt is missing"
        return s
    s.measured = (f"{machine.get('recorded', '?')} on another machine ({machine.get('machine', '?')}), "
                  f"sgpu at {machine.get('sgpu', '?')}: **this machine has no GPU, so this is the record "
                  f"in {RECORD}/, not a new measurement**")
    s.commands = [machine.get("command", "scripts/gpu-check")]
    for key in ("os", "driver", "nccl", "python", "note"):
        if key in machine:
            s.notes.append(f"{key}: {machine[key]}")
    return render(s, folder, "the recorded machine")
