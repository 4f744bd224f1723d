"""4. Output: 8 ranks write 1 GiB of lines in total; the launcher's stdout goes to a file."""
import glob
import mmap
import os
import shutil
import subprocess

from harness import Peer, median, run_once, tail, describe_exit
from peers import TORCH_PYTHON, alternate, floor_tee, launchers, missing_tools, rows_for
from report import Section, fmt_ratio, read_text, shell, timing_table
from writer import line_for

N = 8
LINE = 128  # bytes per line, newline included: a typical training log line
TEE_FLOOR = "pipes and a log copy (each rank into tee)"


def count_lines(path, ranks):
    """(lines, whole lines of each rank) in path, whatever prefix the launcher added.

    A line torn by another rank's bytes matches no rank's whole line. grep and
    wc do the reading: 1 GiB per run in Python would cost more than the runs.
    """
    env = dict(os.environ, LC_ALL="C")
    lines = int(subprocess.run(["wc", "-l", path], capture_output=True, text=True, env=env).stdout.split()[0])
    intact = []
    for r in range(ranks):
        whole = line_for(r, LINE).decode().rstrip("\n")
        p = subprocess.run(["grep", "-c", "-F", "-e", whole, path], capture_output=True, text=True, env=env)
        intact.append(int(p.stdout.strip() or 0))
    return lines, intact


def cleanup(ctx):
    for path in glob.glob(os.path.join(ctx.env["SGPU_HOME"], "runs", "*")) + [os.path.join(ctx.work, "torchrun-logs"),
                                                                             os.path.join(ctx.work, "tee-logs")]:
        shutil.rmtree(path, ignore_errors=True)


# Memory each run has backed before it starts: this many times what it writes.
WARM_FACTOR = 6


def settle_memory(total):
    """Every run starts from the same memory: the previous run's gigabytes
    written back (or deleted and discarded), free memory compacted, and
    enough of it backed by the host for the run's writes.

    Without the sync, whoever ran after the heaviest writer paid for its
    writeback. Without the compaction, whoever ran after a writer of small
    pieces paid for the free memory those left in small pieces: on the
    benchmark's machine, two `dd bs=256K` of 1 GiB each took 2.2-2.9 s right
    after two `dd bs=8K` of 1 GiB had been written and deleted, and 0.26 s
    after the same with `echo 1 > /proc/sys/vm/compact_memory` in between.
    Compacting needs root; without it the note on the section says so.

    The warm-up is for virtual machines that hand free memory back to their
    host (free page reporting, as this benchmark's Firecracker VM does): the
    first write to a page the host took back faults on the host. There, one
    `dd` of 2 GiB into the page cache took 2.5-3.7 s from cold memory and
    0.5-0.6 s right after 6 GiB had been touched and freed (the guest's
    allocator hands out the pages it has not reported yet first). A run that
    writes twice (sgpu, the tee floor) touched twice the cold memory and paid
    that much more, at random. So before each run WARM_FACTOR times its
    output (at most half the available memory) is touched and freed. On a
    machine whose memory is its own this costs time and changes nothing.
    """
    os.sync()
    try:
        with open("/proc/sys/vm/compact_memory", "w") as f:
            f.write("1")
        compacted = True
    except OSError:
        compacted = False
    available = next((int(line.split()[1]) << 10 for line in read_text("/proc/meminfo").splitlines()
                      if line.startswith("MemAvailable:")), 0)
    warm = min(WARM_FACTOR * total, available // 2) & ~(mmap.PAGESIZE - 1)
    if warm > 0:
        mmap.mmap(-1, warm, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE).close()
    return compacted


def logs_problem(ctx, row, per_rank_bytes):
    """sgpu (and the tee floor) also write every byte to a log per rank: each must hold all of them."""
    for r in range(N):
        logs = glob.glob(os.path.join(ctx.env["SGPU_HOME"], "runs", "*", "ranks", str(r), "stdout")) \
            if row.peer.role == "sgpu" else glob.glob(os.path.join(ctx.work, "tee-logs", f"{r}.log"))
        if len(logs) != 1:
            return f"rank {r}: {len(logs)} stdout logs in the run directory, expected 1"
        size = os.path.getsize(logs[0])
        if size != per_rank_bytes:
            return f"rank {r}'s stdout log holds {size} bytes, expected {per_rank_bytes}"
    return ""


def own_cpu_per_gib(row, total):
    if row.peer.role == "floor" or not row.ok or not row.extra.get("own_cpu"):
        return "-"
    return f"{median(row.extra['own_cpu']) / (total / 2**30):.2f} s/GiB"


def one_run(ctx, row, lines_per_rank):
    sink, err = os.path.join(ctx.work, "output.sink"), os.path.join(ctx.work, "output.err")
    cleanup(ctx)
    if not settle_memory(lines_per_rank * LINE * N):
        row.extra["uncompacted"] = True
    run = run_once(row.peer.argv, ctx.env, ctx.root, sink, err, timeout=1200)
    try:
        if run.returncode != 0 or run.timed_out:
            row.fail(f"{describe_exit(run.returncode)}{' (timed out)' if run.timed_out else ''}: {tail(err)}")
            return
        newlines, intact = count_lines(sink, N)
        expected = lines_per_rank * N
        if newlines != expected:
            row.fail(f"{newlines} lines on stdout, expected {expected}")
            return
        if row.peer.role == "sgpu" or row.peer.name == TEE_FLOOR:
            problem = logs_problem(ctx, row, lines_per_rank * LINE)
            if problem:
                row.fail(problem)
                return
        row.values.append(run.wall)
        row.extra.setdefault("torn", []).append(expected - sum(intact))
        if run.own_cpu is not None:
            row.extra.setdefault("own_cpu", []).append(run.own_cpu)
        row.extra.setdefault("cpu", []).append(run.cpu)
    finally:
        os.remove(sink)
        cleanup(ctx)


def run(ctx):
    total = ctx.output_mib << 20
    lines_per_rank = total // N // LINE
    size = f"{total >> 20} MiB" if total % (1 << 30) else f"{total >> 30} GiB"
    s = Section("output", f"4. Output: 8 ranks write {size} in total")
    s.intro = (f"Each rank writes {lines_per_rank} lines of {LINE} bytes to stdout as fast as it can "
               "(`bench/writer.py`, 256 KiB writes); the launcher's stdout is a file. torchrun runs with `--tee 3`, "
               "so it writes every rank's output to log files and copies them to the console; mpirun forwards the "
               "ranks' pipes; the floor gives each rank a pipe into its own `cat`, all writing the same file. "
               "A run counts only if it exits 0 and the file holds exactly the lines written; 'torn lines' counts "
               "lines that another rank's bytes split (the prefixes launchers add are allowed). A second floor sends "
               "each rank through `tee` into a log file of its own as well, so it copies every byte twice as sgpu "
               "does.")
    program = [TORCH_PYTHON, "-S", "bench/writer.py", str(total // N), str(LINE)]
    log_dir = os.path.join(ctx.work, "torchrun-logs")
    rows = rows_for(launchers(ctx, N, program, torchrun_flags=["--tee", "3", "--log_dir", log_dir],
                              floor_name="plain pipes (each rank into cat)", pipe=True))
    # The same pipes, each byte also written to a log file per rank: the work
    # sgpu must do (console and lossless logs), with no launcher.
    rows += rows_for([Peer(TEE_FLOOR, [*floor_tee(N, os.path.join(ctx.work, "tee-logs")), *program], "floor")])
    for row in rows:
        if row.peer in missing_tools([r.peer for r in rows]):
            row.fail(f"{row.peer.argv[0]} is not installed")
    # 5 rounds: on the benchmark's VM one run of the same launcher ranged
    # 0.66-0.83 s (sgpu) and 0.44-0.50 s (plain pipes); two gave ratios from
    # 1.4x to 2.1x.
    alternate(ctx, "output", rows, ctx.rounds_for(5), lambda row, i: one_run(ctx, row, lines_per_rank))
    extra = [
        ("throughput", lambda r: f"{total / median(r.values) / 1e9:.2f} GB/s" if r.ok else "-"),
        ("torn lines", lambda r: str(max(r.extra["torn"])) if r.extra.get("torn") else "-"),
        ("launcher's own CPU", lambda r: own_cpu_per_gib(r, total)),
        ("CPU of all its processes", lambda r: f"{median(r.extra['cpu']) / (total / 2**30):.2f} s/GiB"
         if r.ok and r.extra.get("cpu") else "-"),
    ]
    s.table = timing_table(rows, extra_cols=extra)
    s.commands = [shell(r.peer.argv).replace(ctx.work, "$WORK") + " > $WORK/output.sink" for r in rows]
    s.notes.append("sgpu, like torchrun --tee, writes every byte twice: to the console file and to per-rank log "
                   "files in its run directory (each run checks that every rank's stdout log holds all its bytes); "
                   "plain pipes write each byte once; the tee floor, like sgpu, twice (`tee` into a log file per "
                   "rank and the file), with no launcher: sgpu ÷ it is what the launcher costs beyond the copies.")
    if any(r.extra.get("uncompacted") for r in rows):
        s.notes.append("Free memory could not be compacted before the runs (/proc/sys/vm/compact_memory needs root): "
                       "a run after one that wrote in small pieces may take several times as long (see "
                       "`settle_memory` in bench/output.py).")
    else:
        s.notes.append("Before each run: `sync`, free memory compacted (/proc/sys/vm/compact_memory), so that no "
                       "run pays for the memory the previous one left in small pieces, and "
                       f"{WARM_FACTOR} times the output touched and freed, so that no run pays for memory this "
                       "virtual machine had handed back to its host (`settle_memory` in bench/output.py says why).")
    s.notes.append("'launcher's own CPU': user+system time of the launcher process alone (not of the ranks or other "
                   "processes it reaped), read from /proc before it is reaped, per GiB forwarded. On a loaded "
                   "machine it says more than the wall time: 1 / it is what one free core could forward.")
    base, plain = rows[0], next((r for r in rows if r.peer.role == "floor" and r.peer.name != TEE_FLOOR), None)
    if base.ok and plain and plain.ok and base.extra.get("cpu") and plain.extra.get("cpu"):
        cpu_ratio = median(base.extra["cpu"]) / median(plain.extra["cpu"])
        s.notes.append(f"'CPU of all its processes': user+system time of the launcher and everything it reaped (the "
                       f"ranks, and the floors' `cat`s and `tee`s), per GiB. sgpu's processes used {cpu_ratio:.2f}x "
                       f"the CPU of plain pipes'. Where both keep every core busy (wall time near CPU / "
                       f"{os.cpu_count()} cores), that is about the least sgpu ÷ plain pipes can be on this machine: "
                       "sgpu writes each byte a second time (its log) and prefixes every line, which plain pipes "
                       "do not.")
    if not base.ok:
        s.sgpu_failure = base.failure
    elif max(base.extra["torn"]):
        s.sgpu_failure = f"sgpu tore {max(base.extra['torn'])} lines"
    for r in rows[1:]:
        if r.ok and base.ok:
            what = f"{r.peer.name} ÷ sgpu, {size} of output" if r.peer.role == "peer" else \
                f"sgpu ÷ {r.peer.name}, {size} of output"
            value = median(r.values) / median(base.values) if r.peer.role == "peer" else \
                median(base.values) / median(r.values)
            s.headline.append((what, fmt_ratio(value)))
    return s
