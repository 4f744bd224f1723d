"""Where a launch of 8 ranks of /bin/true spends its time beyond the floor: differences of medians.

Run by hand: `python3 bench/launch_phases.py [SGPU] [ROUNDS]`; prints a markdown table for BENCHMARKS.md.
Every variant is timed by hyperfine (-N, 10 runs a round after a warm-up), the variants rotated each round;
a phase's time is the difference of two variants' medians, so it carries both variants' noise.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SGPU = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(ROOT, "build/apps/sgpu/sgpu")
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 4
KEEP = 100


def main():
    ext4 = tempfile.mkdtemp(prefix="sgpu-phases-")
    shm = tempfile.mkdtemp(prefix="sgpu-phases-", dir="/dev/shm") if os.path.isdir("/dev/shm") else ext4
    steady = os.path.join(ext4, "steady")
    launch = [SGPU, "launch", "--nproc"]
    variants = {
        "true": ["/bin/true"],
        "version": [SGPU, "--version"],
        "floor1": ["bash", "bench/floor.sh", "1", "/bin/true"],
        "floor8": ["bash", "bench/floor.sh", "8", "/bin/true"],
        "tmpfs1": [*launch, "1", "--keep-runs", "0", "--log-dir", os.path.join(shm, "a"), "--no-python", "/bin/true"],
        "tmpfs8": [*launch, "8", "--keep-runs", "0", "--log-dir", os.path.join(shm, "b"), "--no-python", "/bin/true"],
        "disk8": [*launch, "8", "--keep-runs", "0", "--log-dir", os.path.join(ext4, "c"), "--no-python", "/bin/true"],
        "steady8": [*launch, "8", "--log-dir", steady, "--no-python", "/bin/true"],
    }
    env = dict(os.environ, OMP_NUM_THREADS="1")
    for _ in range(KEEP):
        subprocess.run(variants["steady8"], env=env, cwd=ROOT, capture_output=True, check=True)
    times = {k: [] for k in variants}
    out = os.path.join(ext4, "h.json")
    names = list(variants)
    try:
        for r in range(ROUNDS):
            for k in names[r % len(names):] + names[:r % len(names)]:
                subprocess.run(["hyperfine", "-N", "--runs", "10", "--warmup", "1", "--export-json", out,
                                " ".join(variants[k])], env=env, cwd=ROOT, capture_output=True, check=True)
                times[k] += json.load(open(out))["results"][0]["times"]
    finally:
        shutil.rmtree(ext4, ignore_errors=True)
        if shm != ext4:
            shutil.rmtree(shm, ignore_errors=True)
    m = {k: statistics.median(v) * 1000 for k, v in times.items()}
    per_rank = (m["tmpfs8"] - m["tmpfs1"]) / 7
    floor_rank = (m["floor8"] - m["floor1"]) / 7
    rows = [
        ("the floor: bash, 8 ranks of /bin/true started with & and reaped", m["floor8"], "floor8"),
        ("sgpu, 8 ranks, steady state (100 runs kept, one retired)", m["steady8"], "steady8"),
        ("sgpu's own process start beyond /bin/true's (loader, relocations, static init, --version's CLI)",
         m["version"] - m["true"], "version - true"),
        ("a launch's fixed work beyond its process start (plan, run directory on tmpfs, orphan guard, "
         "summary, state), minus one rank", m["tmpfs1"] - m["version"] - per_rank, "tmpfs1 - version - rank"),
        (f"per rank: sgpu {per_rank:.2f} ms against the floor's {floor_rank:.2f} ms, so 8 ranks add",
         8 * (per_rank - floor_rank), "7 x (tmpfs8 - tmpfs1) / 7 - floor's"),
        ("the run directory on this disk (ext4) rather than tmpfs", m["disk8"] - m["tmpfs8"], "disk8 - tmpfs8"),
        ("retiring the oldest run (rename into the trash; deletion detached)", m["steady8"] - m["disk8"],
         "steady8 - disk8"),
    ]
    print(f"| phase | time | from |\n|---|---|---|")
    for what, ms, how in rows:
        print(f"| {what} | {ms:.2f} ms | {how} |")
    print()
    print("medians (ms): " + ", ".join(f"{k} {v:.2f}" for k, v in m.items()))


if __name__ == "__main__":
    main()
