"""Where a launch of 8 ranks of /bin/true spends its time beyond the floor, as differences of medians.

Part of the launch section of scripts/bench (not in --quick); by hand: `python3 bench/launch_phases.py [SGPU]`
prints the table. Every variant is timed by hyperfine (-N, 10 runs a round after a warm-up), the variants
rotated each round; a phase's time is the difference of two variants' medians, so it carries both one's noise.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

KEEP = 100  # sgpu's default --keep-runs


def variants(sgpu, ext4, shm, steady_runs):
    launch = [sgpu, "launch", "--nproc"]
    return {
        "true": ["/bin/true"],
        "version": [sgpu, "--version"],
        "floor1": ["bash", "bench/floor.sh", "1", "/bin/true"],
        "floor8": ["bash", "bench/floor.sh", "8", "/bin/true"],
        "tmpfs1": [*launch, "1", "--keep-runs", "0", "--log-dir", os.path.join(shm, "a"), "--no-python", "/bin/true"],
        "tmpfs8": [*launch, "8", "--keep-runs", "0", "--log-dir", os.path.join(shm, "b"), "--no-python", "/bin/true"],
        "disk8": [*launch, "8", "--keep-runs", "0", "--log-dir", os.path.join(ext4, "c"), "--no-python", "/bin/true"],
        "steady8": [*launch, "8", "--log-dir", steady_runs, "--no-python", "/bin/true"],
    }


def placeholders(command):
    """The scratch directories of a run as $DISK and $SHM, for commands that read the same in every run."""
    return re.sub(r"/tmp/sgpu-phases-\w+", "$DISK", re.sub(r"/dev/shm/sgpu-phases-\w+", "$SHM", command))


def measure(sgpu, root, env, rounds=4, log=lambda _: None, steady_runs=None):
    """Medians in ms per variant: {name: ms}, and the commands, {name: argv}. `steady_runs`: a runs directory
    already holding KEEP runs (the launch section's); None: one is made here and filled."""
    ext4 = tempfile.mkdtemp(prefix="sgpu-phases-")
    shm = tempfile.mkdtemp(prefix="sgpu-phases-", dir="/dev/shm") if os.path.isdir("/dev/shm") else ext4
    fill = steady_runs is None
    cmds = variants(sgpu, ext4, shm, os.path.join(ext4, "steady") if fill else steady_runs)
    env = dict(env, OMP_NUM_THREADS="1")
    times = {k: [] for k in cmds}
    out = os.path.join(ext4, "hyperfine.json")
    names = list(cmds)
    try:
        for _ in range(KEEP if fill else 0):
            subprocess.run(cmds["steady8"], env=env, cwd=root, capture_output=True, check=True)
        for r in range(rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                subprocess.run(["hyperfine", "-N", "--runs", "10", "--warmup", "1", "--export-json", out,
                                " ".join(cmds[k])], env=env, cwd=root, capture_output=True, check=True)
                times[k] += json.load(open(out))["results"][0]["times"]
            log(f"launch-phases: round {r + 1}/{rounds} done")
    finally:
        shutil.rmtree(ext4, ignore_errors=True)
        if shm != ext4:
            shutil.rmtree(shm, ignore_errors=True)
    return {k: statistics.median(v) * 1000 for k, v in times.items()}, cmds


def table(m):
    """Rows of (phase, time, from): the header first."""
    per_rank = (m["tmpfs8"] - m["tmpfs1"]) / 7
    floor_rank = (m["floor8"] - m["floor1"]) / 7
    rows = [
        ("the floor: bash starts 8 ranks of /bin/true with & and reaps them", m["floor8"], "floor8"),
        ("sgpu, the same 8 ranks, steady state (100 runs kept, one retired)", m["steady8"], "steady8"),
        ("sgpu's process start beyond /bin/true's (loader, relocations, static constructors, the CLI of every "
         "command)", m["version"] - m["true"], "version - true"),
        ("a launch's fixed work beyond that start (spec, plan, run directory on tmpfs, orphan guard, summary, "
         "state), less one rank", m["tmpfs1"] - m["version"] - per_rank, "tmpfs1 - version - per rank"),
        (f"8 ranks at sgpu's {per_rank:.2f} ms a rank against the floor's {floor_rank:.2f} ms (pipes, pidfds, "
         "the loop's registrations, events, the rank's setup before exec)", 8 * (per_rank - floor_rank),
         "8 x the difference"),
        ("a new run directory on this machine's ext4 rather than tmpfs (~20 files made)", m["disk8"] - m["tmpfs8"],
         "disk8 - tmpfs8"),
        ("retiring the oldest run and taking a retired one's directory, against making a new one (renames: the "
         "run into the trash, the old run's events and logs out of the one taken; its state, spec and summary "
         "overwritten; the deletion, detached, every 8 launches): below zero when taking costs less",
         m["steady8"] - m["disk8"], "steady8 - disk8"),
    ]
    return [["phase", "time", "from (medians)"]] + [[what, f"{ms:.2f} ms", how] for what, ms, how in rows]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sgpu = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else os.path.join(root, "build/apps/sgpu/sgpu")
    m, _ = measure(sgpu, root, os.environ, log=lambda line: print(line, file=sys.stderr))
    for row in table(m):
        print("| " + " | ".join(row) + " |")
    print("medians: " + ", ".join(f"{k} {v:.2f} ms" for k, v in m.items()))


if __name__ == "__main__":
    main()
