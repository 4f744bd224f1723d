"""1. Launch: 8 ranks of /bin/true, start to finish, timed by hyperfine."""
import json
import re
import os
import shlex
import shutil
import subprocess

import launch_phases
from harness import Peer, Row, median, run_once, tail, describe_exit
from peers import alternate, floor, launchers, missing_tools, rows_for, sgpu
from report import Section, fmt_ratio, shell, timing_table

N = 8
KEEP = 100  # sgpu's default --keep-runs
MANY = 1000  # ranks of the second table: one node's worth of a large job
SELF_CHECK = "self-check: a peer that exits 1 (must get no ratio)"
PAIRS, PAIRS_QUICK = 40, 6  # the steady state's paired series


def runs_per_round(peer, quick):
    """hyperfine runs per peer per round: more for the fast ones, one for torchrun (seconds each)."""
    if quick:
        return 3 if peer.role != "peer" else 1
    return {"sgpu": 10, "floor": 10}.get(peer.role, 1 if peer.name == "torchrun" else 3)


def hyperfine_runs(peer, quick):
    runs = runs_per_round(peer, quick)
    return ["--runs", str(runs), *(["--warmup", "1"] if runs > 1 else [])]


def verify(ctx, row):
    """One untimed run with ranks that leave a file each: the launcher really started 8 ranks."""
    marks = ctx.scratch("launch-marks")
    program = [x for x in row.peer.argv if x != "/bin/true"] + ["bench/ranks.sh", "mark", marks]
    run = run_once(program, ctx.env, ctx.root, os.path.join(ctx.work, "launch.out"),
                   os.path.join(ctx.work, "launch.err"), timeout=300)
    started = sorted(os.listdir(marks))
    if run.returncode != 0 or run.timed_out:
        row.fail(f"verification run: {describe_exit(run.returncode)}: {tail(run.stderr)}")
    elif started != sorted(str(r) for r in range(N)):
        row.fail(f"verification run: ranks {started} ran, expected 0-{N - 1}")


def shipped_torchrun_note(ctx):
    """Runs Debian's /usr/bin/torchrun as shipped once, so the note about the wrapper stays true."""
    argv = ["/usr/bin/torchrun", "--standalone", "--nproc_per_node", "2", "--no_python", "/bin/true"]
    if not os.path.exists(argv[0]):
        return "/usr/bin/torchrun is not installed."
    run = run_once(argv, ctx.env, ctx.root, os.path.join(ctx.work, "shipped.out"),
                   os.path.join(ctx.work, "shipped.err"), timeout=300)
    with open(run.stderr, errors="replace") as f:
        broken = "AttributeError: 'NoneType' object has no attribute 'get'" in f.read()
    if broken:
        return (f"Checked in this run: `{shell(argv)}` (Debian's torchrun as shipped) "
                f"ended with {describe_exit(run.returncode)} and `AttributeError: 'NoneType' object has no attribute "
                "'get'`, so torchrun runs through bench/torchrun_py311.py.")
    return (f"Checked in this run: `{shell(argv)}` (Debian's torchrun as shipped) ended with "
            f"{describe_exit(run.returncode)} and without the AttributeError: the wrapper may no longer be needed.")


def hyperfine_block(ctx, row, round_index, runs=None):
    out = os.path.join(ctx.work, f"hyperfine-{round_index}.json")
    runs = runs or hyperfine_runs(row.peer, ctx.quick)
    argv = ["hyperfine", "-N", "--style", "basic", "--export-json", out, *runs, shlex.join(row.peer.argv)]
    p = subprocess.run(argv, cwd=ctx.root, env=ctx.env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        message = (p.stderr.strip().splitlines() or ["no message"])[-1]
        code = re.search(r"non-zero exit code: (-?\d+)", message)
        row.fail(f"exit {code.group(1)} (hyperfine)" if code else f"hyperfine: {message}")
        return
    result = json.load(open(out))["results"][0]
    codes = [c for c in result.get("exit_codes", []) if c != 0]
    if codes:
        row.fail(f"exit codes {codes}")
        return
    row.values += result["times"]


def run(ctx):
    peers = launchers(ctx, N, ["/bin/true"])
    if ctx.quick:
        # Self-check of the refusal rule: a peer that fails must get no ratio.
        peers.insert(1, Peer(SELF_CHECK, ["bash", "-c", "exit 1"]))
    rows = rows_for(peers)
    s = Section("launch", "1. Launch: 8 ranks of /bin/true")
    s.intro = ("Time from starting the launcher until it has exited, with 8 ranks that exit at once: the cost of "
               "the launcher itself. hyperfine times each command (`-N`, no shell); each round runs every launcher "
               "(sgpu and the floor 10 times, mpirun 3, torchrun once, after a warm-up run for those with more than "
               "one), the order rotated each round. Before timing, one run of each launcher with ranks that leave a "
               "file each checks that all 8 ranks really ran; hyperfine fails a launcher on any non-zero exit.")
    missing = missing_tools(peers)
    if shutil.which("hyperfine") is None:
        for row in rows:
            row.fail("hyperfine is not installed (scripts/install-deps installs it)")
    for row in rows:
        if row.failure:
            continue
        if row.peer in missing:
            row.fail(f"{row.peer.argv[0]} is not installed")
        elif row.peer.name != SELF_CHECK:
            verify(ctx, row)
    if not ctx.quick:
        s.notes.append(shipped_torchrun_note(ctx))
    ctx.log("launch: verification runs done")
    alternate(ctx, "launch", rows, ctx.rounds_for(3), lambda row, i: hyperfine_block(ctx, row, i))
    s.table = timing_table(rows)
    s.commands = [shell(["hyperfine", "-N", *hyperfine_runs(r.peer, ctx.quick), shlex.join(r.peer.argv)])
                  for r in rows]
    by_name = {r.peer.name: r for r in rows}
    base = by_name["sgpu"]
    if not base.ok:
        s.sgpu_failure = base.failure
    for name in ("torchrun", "mpirun"):
        r = by_name.get(name)
        if r and r.ok and base.ok:
            s.headline.append((f"{name} ÷ sgpu, start-to-exit time",
                               fmt_ratio(median(r.values) / median(base.values))))
    steady_runs = steady_state(ctx, s)  # the figure the summary quotes first: a user's home is not new
    fl = next(r for r in rows if r.peer.role == "floor")
    if fl.ok and base.ok:
        s.headline.append(("sgpu ÷ floor, a new SGPU_HOME (nothing to retire)",
                           fmt_ratio(median(base.values) / median(fl.values))))
    bound_ranks(ctx, s)
    if not ctx.quick:
        phases(ctx, s, steady_runs)
        many_ranks(ctx, s)
    if ctx.quick:
        cells = next(t for t in s.table if t[0] == SELF_CHECK)
        if not all(c.startswith("no ratio") for c in cells[4:6]):
            s.sgpu_failure = "self-check: a failing peer was given a ratio"
    return s


def count_runs(runs_dir):
    return sum(1 for name in os.listdir(runs_dir) if not name.startswith("."))


def new_ext4(ctx):
    """A new ext4 file system (mkfs.ext4's defaults: journaled) on a loop device, mounted under the work
    directory: (mount point, undo), or (None, reason) where this machine cannot make one (not root, no loop
    devices). The work directory's own file system carries the whole machine's history."""
    image, mnt = os.path.join(ctx.work, "ext4.img"), os.path.join(ctx.work, "ext4")
    os.makedirs(mnt, exist_ok=True)
    try:
        with open(image, "wb") as f:
            f.truncate(512 << 20)
        for cmd in (["mkfs.ext4", "-q", "-F", image], ["mount", "-o", "loop", image, mnt]):
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                os.unlink(image)
                return None, f"{shlex.join(cmd[:2])}: {p.stderr.strip()[-200:] or describe_exit(p.returncode)}"
    except OSError as e:
        return None, str(e)

    def undo():
        subprocess.run(["umount", mnt], capture_output=True)
        os.unlink(image)
    return mnt, undo


def paired_ratio(ctx, row, floor_row, pairs):
    """The issue's measure: sgpu and the floor run for run, each run timed by hyperfine alone (`--runs 1`, the
    same clock and spawn as the tables), the order alternated; the median of the per-pair ratios. A load that
    comes and goes falls on both runs of a pair, not on one block of ten. None when a run failed."""
    ratios = []
    for i in range(pairs):
        values = {}
        for r in (row, floor_row) if i % 2 == 0 else (floor_row, row):
            one = Row(r.peer)
            hyperfine_block(ctx, one, f"pair-{i}", ["--runs", "1"])
            if one.failure:
                row.fail(f"paired run {i + 1}: {one.failure}")
                return None
            values[r.peer.role] = one.values[0]
        ratios.append(values["sgpu"] / values["floor"])
    ctx.log(f"launch-steady: {pairs} pairs, median ratio {median(ratios):.3f}")
    return median(ratios), min(ratios), max(ratios)


def steady_state(ctx, s):
    """8 ranks of /bin/true in a runs directory that already holds --keep-runs runs, so that every launch also
    retires the oldest: a user's home after 100 launches. The floor runs in the same rounds. Twice: in the work
    directory, and on a new ext4 file system where this machine can make one."""
    runs_dir = ctx.scratch("launch-steady-runs")
    argv = [*sgpu(ctx, N), "--log-dir", runs_dir, "--no-python", "/bin/true"]
    peers = [Peer(f"sgpu, {KEEP} runs kept (steady state)", argv, "sgpu"),
             Peer("floor (bash & wait)", [*floor(N), "/bin/true"], "floor")]
    mnt, undo = new_ext4(ctx)  # undo: what unmounts it, or why there is none
    dirs = [runs_dir]  # each sgpu row's runs directory, in the rows' order
    if mnt:
        dirs.append(os.path.join(mnt, "runs"))
        fresh_fs = [*sgpu(ctx, N), "--log-dir", dirs[1], "--no-python", "/bin/true"]
        peers.append(Peer(f"sgpu, {KEEP} runs kept (steady state), on a new ext4 file system", fresh_fs, "sgpu"))
    rows = rows_for(peers)
    base, fl = rows[0], rows[1]
    steady = list(zip([r for r in rows if r.peer.role == "sgpu"], dirs))
    try:
        for row, runs_in in steady:
            for _ in range(KEEP):
                p = subprocess.run(row.peer.argv, cwd=ctx.root, env=ctx.env, capture_output=True, text=True,
                                   timeout=300)
                if p.returncode != 0:
                    row.fail(f"filling the runs directory: {describe_exit(p.returncode)}: {p.stderr.strip()[-300:]}")
                    break
            if not row.failure and count_runs(runs_in) != KEEP:
                row.fail(f"filling the runs directory: {count_runs(runs_in)} runs, expected {KEEP}")
        runs = ["--runs", "3" if ctx.quick else "10", "--warmup", "1"]
        alternate(ctx, "launch-steady", rows, ctx.rounds_for(3), lambda row, i: hyperfine_block(ctx, row, i, runs))
        paired = paired_ratio(ctx, base, fl, PAIRS_QUICK if ctx.quick else PAIRS) if base.ok and fl.ok else None
        for row, runs_in in steady:  # every launch retired one: no more, no fewer
            if row.ok and count_runs(runs_in) != KEEP:
                row.fail(f"{count_runs(runs_in)} runs left after the timed launches, expected {KEEP}")
    finally:
        if mnt:
            undo()
    where = (f"The second sgpu row keeps its runs on a new 512 MiB ext4 file system (mkfs.ext4's defaults, a loop "
             f"device) rather than in the work directory, whose file system carries the machine's history (ext4 "
             f"without a journal reuses no inode freed in the last minute or more, so there each new inode scans "
             f"past every recent deletion on the machine: the suite's, the builds')"
             if mnt else f"No new ext4 file system for a second sgpu row here ({undo})")
    s.more_tables.append((f"{N} ranks of /bin/true with a runs directory already holding {KEEP} runs (the default "
                          "`--keep-runs`), so that each launch also retires the oldest run and takes a retired run's "
                          "directory for its own (runs/recycle.hpp): the steady state of a user's home. Filled by 100 launches first; checked to hold exactly 100 runs at the end. "
                          f"{where}:", timing_table(rows)))
    if mnt:
        s.commands.append("truncate -s 512M $WORK/ext4.img && mkfs.ext4 -q -F $WORK/ext4.img && "
                          "mount -o loop $WORK/ext4.img $WORK/ext4  # the new ext4 file system")
    s.commands += [shell(["hyperfine", "-N", *runs, shlex.join(r.peer.argv)]).replace(ctx.work, "$WORK")
                   for r in rows]
    s.commands.append(f"# paired: {PAIRS_QUICK if ctx.quick else PAIRS} times, the order alternated: "
                      + " ; ".join(shell(["hyperfine", "-N", "--runs", "1", shlex.join(r.peer.argv)])
                                   for r in (base, fl)).replace(ctx.work, "$WORK"))
    if not base.ok:
        s.sgpu_failure = f"steady state: {base.failure}"
        return None
    if fl.ok:
        if paired:
            pairs = PAIRS_QUICK if ctx.quick else PAIRS
            s.headline.append((f"sgpu ÷ floor, steady state, paired run for run (median of {pairs} pairs)",
                               fmt_ratio(paired[0])))
            s.notes.insert(0, f"Paired: after the rounds above, {pairs} pairs of one steady-state sgpu run and one "
                              f"floor run, each timed by hyperfine alone (`--runs 1`), the order alternated pair by "
                              f"pair: the median of the {pairs} ratios is {fmt_ratio(paired[0])} (from "
                              f"{fmt_ratio(paired[1])} to {fmt_ratio(paired[2])}). A pair's two runs share the "
                              "machine's moment, so this is the figure to compare across runs.")
        s.headline.append(("sgpu ÷ floor, steady state (100 runs kept, one retired per launch)",
                           fmt_ratio(median(base.values) / median(fl.values))))
        if len(rows) > 2 and rows[2].ok:
            s.headline.append(("sgpu ÷ floor, steady state on a new ext4 file system",
                               fmt_ratio(median(rows[2].values) / median(fl.values))))
    return runs_dir


def phases(ctx, s, steady_runs):
    """Where the steady-state launch spends its time beyond the floor (bench/launch_phases.py), its steady
    variant in the runs directory steady_state() filled (None: it failed, and phases fills one)."""
    m, cmds = launch_phases.measure(ctx.sgpu, ctx.root, ctx.env, rounds=ctx.rounds_for(4), log=ctx.log,
                                    steady_runs=steady_runs)
    s.more_tables.append(("Where the time goes: a steady-state launch of 8 ranks of /bin/true against the floor, "
                          "split by timing variants of it (bench/launch_phases.py, 10 runs a round, rounds "
                          "rotated; each phase is a difference of two medians, so it carries the noise of both). "
                          "`tmpfs` runs keep their runs in /dev/shm (`$SHM`, `$DISK` being /tmp) and retire none "
                          "(`--keep-runs 0`):",
                          launch_phases.table(m)))
    hyperfine = ["hyperfine", "-N", "--runs", "10", "--warmup", "1"]
    s.commands += [launch_phases.placeholders(shell([*hyperfine, shlex.join(argv)])).replace(ctx.work, "$WORK")
                   + f"  # {name}" for name, argv in cmds.items()]


def bound_ranks(ctx, s):
    """8 ranks of /bin/true with and without --cpu-bind core: what reading the topology (hwloc) and binding each
    rank between clone and exec adds to a start (the aim: under 1 ms a rank)."""
    peers = [Peer("sgpu", [*sgpu(ctx, N), "--no-python", "/bin/true"], "sgpu"),
             Peer("sgpu --cpu-bind core", [*sgpu(ctx, N), "--cpu-bind", "core", "--no-python", "/bin/true"])]
    rows = rows_for(peers)
    runs = ["--runs", "3" if ctx.quick else "10", "--warmup", "1"]
    alternate(ctx, "launch-bound", rows, ctx.rounds_for(3), lambda row, i: hyperfine_block(ctx, row, i, runs))
    s.more_tables.append((f"{N} ranks of /bin/true, unbound and each bound to a core (`--cpu-bind core`):",
                          timing_table(rows)))
    s.commands += [shell(["hyperfine", "-N", *runs, shlex.join(r.peer.argv)]) for r in rows]
    plain, bound = rows
    if not bound.ok:
        s.sgpu_failure = f"--cpu-bind core: {bound.failure}"
    elif plain.ok:
        per_rank_ms = (median(bound.values) - median(plain.values)) / N * 1000
        s.headline.append(("--cpu-bind core, cost per rank", f"{per_rank_ms:+.2f} ms"))


def many_ranks(ctx, s):
    """1000 ranks of /bin/true on this node: sgpu against the floor, 3 runs each per round."""
    peers = [p for p in launchers(ctx, MANY, ["/bin/true"]) if p.role in ("sgpu", "floor")]
    rows = rows_for(peers)
    runs = ["--runs", "3", "--warmup", "1"]
    alternate(ctx, "launch-1000", rows, ctx.rounds_for(3), lambda row, i: hyperfine_block(ctx, row, i, runs))
    s.more_tables.append((f"{MANY} ranks of /bin/true on this node (3 runs per round, after a warm-up run):",
                          timing_table(rows)))
    s.commands += [shell(["hyperfine", "-N", *runs, shlex.join(r.peer.argv)]) for r in rows]
    base, fl = rows
    if not base.ok:
        s.sgpu_failure = f"{MANY} ranks: {base.failure}"
    elif fl.ok:
        s.headline.append((f"sgpu ÷ floor, {MANY} ranks", fmt_ratio(median(base.values) / median(fl.values))))
