"""Running peers in alternating rounds, checking every run, and the statistics.

A comparison has peers (sgpu, the other launchers, the floor). Each round runs
every peer once, the order rotated by one each round, so that a change in the
machine's load hits every peer alike. Every run is checked (exit code and
output); a peer with a failed run gets no figure and no ratio, and neither
does anything compared with it.
"""
import dataclasses
import os
import signal
import statistics
import subprocess
import threading
import time


@dataclasses.dataclass
class Peer:
    name: str
    argv: list
    role: str = "peer"  # "sgpu", "peer" or "floor"
    env: dict = None
    note: str = ""


@dataclasses.dataclass
class Run:
    wall: float  # seconds from spawn to reap
    returncode: int  # negative: killed by that signal
    cpu: float  # user+system seconds of the launcher and every process it reaped
    started: float  # time.time() at spawn
    ended: float  # time.time() at reap
    stdout: str  # paths of the captured output
    stderr: str
    timed_out: bool = False
    samples: list = dataclasses.field(default_factory=list)
    own_cpu: float = None  # user+system seconds of the launcher alone, not of the processes it reaped


@dataclasses.dataclass
class Row:
    peer: Peer
    values: list = dataclasses.field(default_factory=list)  # the figure, one per run
    failure: str = ""  # why this peer's figures are refused; "" when every run passed
    extra: dict = dataclasses.field(default_factory=dict)

    def fail(self, why):
        if not self.failure:
            self.failure = why

    @property
    def ok(self):
        return not self.failure and bool(self.values)


def descendants(pid):
    """Every live process below pid, from /proc (children before grandchildren)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def kill_tree(pid):
    """SIGKILL pid and everything below it: only what this harness started."""
    for p in [pid, *descendants(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def own_cpu_seconds(pid):
    """utime + stime of a process that has exited and is not yet reaped; None if unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run_once(argv, env, cwd, out_path, err_path, timeout, sampler=None, sample_every=0.2):
    """Runs argv once; wall time from spawn to reap (os.wait4, blocking, no polling).

    A timer thread kills the tree on timeout. With a sampler, a thread calls
    sampler(pid) every sample_every seconds while the process lives.
    """
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        started = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True)
    timed_out = threading.Event()
    done = threading.Event()

    def on_timeout():
        timed_out.set()
        kill_tree(proc.pid)

    timer = threading.Timer(timeout, on_timeout)
    timer.start()
    samples = []
    sampler_thread = None
    if sampler:
        def sample_loop():
            while not done.wait(sample_every):
                s = sampler(proc.pid)
                if s is not None:
                    samples.append(s)
        sampler_thread = threading.Thread(target=sample_loop, daemon=True)
        sampler_thread.start()
    # Exited but not reaped: /proc still holds the launcher's own CPU times
    # (utime, stime; what it reaped is in cutime), which wait4's rusage mixes in.
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    own_cpu = own_cpu_seconds(proc.pid)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    ended = time.time()
    done.set()
    timer.cancel()
    if sampler_thread:
        sampler_thread.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(wall=wall, returncode=proc.returncode, cpu=usage.ru_utime + usage.ru_stime,
               started=started, ended=ended, stdout=out_path, stderr=err_path,
               timed_out=timed_out.is_set(), samples=samples, own_cpu=own_cpu)


def rotated(items, i):
    i %= len(items)
    return items[i:] + items[:i]


def tail(path, n=400):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode(errors="replace").strip().replace("\n", " | ")
    except OSError:
        return ""


def describe_exit(rc):
    return f"killed by signal {-rc}" if rc < 0 else f"exit {rc}"


# --- statistics -------------------------------------------------------------

def median(values):
    return statistics.median(values)


def spread(values):
    return min(values), max(values)


def sgpu_row(rows):
    return next(r for r in rows if r.peer.role == "sgpu")


def floor_row(rows):
    return next((r for r in rows if r.peer.role == "floor"), None)


def ratio(row, base):
    """row's median over base's median, or a sentence saying why there is none."""
    if not row.ok:
        return None, f"no ratio: {row.peer.name} failed"
    if not base.ok:
        return None, f"no ratio: {base.peer.name} failed"
    b = median(base.values)
    if b <= 0:
        return None, "no ratio: zero base"
    return median(row.values) / b, ""
