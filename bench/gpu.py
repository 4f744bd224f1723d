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
import subprocess
import sys

from harness import Peer, Row, ratio, sgpu_row
from report import Section, fmt_ratio, fmt_seconds, read_text, timing_table

RECORD = os.path.join("bench", "gpu-record")
SIZES_SHOWN = {8, 1 << 20, 64 << 20, 1 << 30}
EXPECTED_TO_FAIL = ("gpu-type-other", "gpus-too-many")  # exit 2: a GPU type or count that is not there


def _read(folder, name):
    return read_text(os.path.join(folder, name))


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


def timing_rows(text):
    """timing-runs.txt ("LAUNCHER EXIT SECONDS" per run) as the benchmark's rows."""
    rows = {name: Row(Peer(name, [], "sgpu" if name == "sgpu" else "peer")) for name in ("sgpu", "torchrun")}
    for line in text.splitlines():
        who, rc, seconds = line.split()
        if who not in rows:
            continue
        rows[who].values.append(float(seconds))
        if rc != "0":
            rows[who].fail(f"a run exited {rc}")
    return list(rows.values())


def render(s, folder, machine):
    summary = _read(folder, "summary.txt")
    done = steps(summary)
    if not done:
        s.skipped = f"no scripts/gpu-check output in {folder}"
        return s
    s.more_tables.append((f"Each command of scripts/gpu-check, once ({machine}):",
                          [["step", "exit", "wall time", "command"]] +
                          [[name, str(rc), fmt_seconds(sec), f"`{cmd}`"] for name, rc, sec, cmd in done]))
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
    rows = timing_rows(_read(folder, "timing-runs.txt"))
    if all(r.values for r in rows):
        s.table = timing_table(rows)
        value, _ = ratio(rows[1], sgpu_row(rows))
        if value is not None:
            s.headline.append(("torchrun ÷ sgpu, a 1-GPU PyTorch NCCL job end to end", fmt_ratio(value)))
    preflight = next((line for line in _read(folder, "preflight.err").splitlines()
                      if line.startswith("sgpu: preflight:")), "")
    if preflight:
        s.headline.append(("`--preflight` on the job's GPU", preflight.removeprefix("sgpu: preflight: ")))
    bad = [name for name, rc, _, _ in done if (rc != 0) != (name in EXPECTED_TO_FAIL)]
    s.notes.append("Every step exited as it should (0, and 2 for the GPU type and the GPU count that are not there)."
                   if not bad else f"Steps that failed: {', '.join(bad)}.")
    return s


def run(ctx):
    s = Section("gpu", "12. GPU: sgpu on a real NVIDIA GPU, and torchrun on the same NCCL job")
    s.intro = " ".join(__doc__.split("\n\n", 1)[1].split())
    if not ctx.quick and has_gpu(ctx):
        folder = ctx.scratch("gpu-check")
        env = dict(ctx.env, SGPU_BIN=ctx.sgpu)
        subprocess.run(["scripts/gpu-check", folder], cwd=ctx.root, env=env, stdout=subprocess.DEVNULL, check=False)
        s.commands = [f"SGPU_BIN={ctx.sgpu} scripts/gpu-check {folder}"]
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


if __name__ == "__main__":
    # scripts/gpu-check's own summary: python3 bench/gpu.py OUT_DIR
    print(render(Section("gpu", "sgpu on this machine's GPU"), sys.argv[1], "this machine").compact())
