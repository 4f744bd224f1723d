"""A hostile environment for sgpu's processes and descriptors: ranks that
leave thousands of orphans, restarts, a low descriptor limit, a flood of
connections, refused nodes, escaped daemons after kill -9, stopped ranks."""
import glob
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import pid_alive
from multinode import agent, free_port, make_secret_file, static_node, wait_for
import rdzv_wire as w


def proc_children(pid):
    """The children of `pid` as {pid: state letter}, from /proc."""
    out = {}
    for task in glob.glob(f"/proc/{pid}/task/*/children"):
        try:
            with open(task) as f:
                for child in f.read().split():
                    out[int(child)] = None
        except FileNotFoundError:
            pass
    for child in list(out):
        try:
            with open(f"/proc/{child}/stat") as f:
                out[child] = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            del out[child]
    return out


def cpu_seconds(pid):
    """utime + stime of `pid` (and its reaped children: none that matter here)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_line(stream, pattern, timeout=60):
    """Reads `stream` (a text pipe) until a line matches; returns the match."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f"no line matching {pattern!r} in {seen[-20:]}")


# --- orphans ------------------------------------------------------------------

ORPHANS = r"""
import os, sys, time
for i in range(1500):
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os._exit(0)  # the grandchild: adopted by sgpu, dead at once
        os._exit(0)
    os.waitpid(pid, 0)
print("forked", flush=True)
time.sleep(600)
"""


def test_short_lived_orphans_are_reaped_during_the_run(sgpu, tmp_path):
    job = tmp_path / "orphans.py"
    job.write_text(ORPHANS)
    p = sgpu.popen("launch", "--nproc", 1, "--grace", "2s", job)
    try:
        wait_line(p.stdout, r"forked")
        # 1,500 zombies if nobody reaps them; a few at most in flight.
        def few_zombies():
            return sum(1 for state in proc_children(p.pid).values() if state == "Z") < 20
        wait_for(few_zombies, timeout=15, what="sgpu to reap the rank's exited orphans")
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM


# --- descriptors ---------------------------------------------------------------

# Fails 12 attempts at once, then sleeps.
FLAPPING = ('echo "attempt $TORCHELASTIC_RESTART_COUNT pid $$"; '
            '[ "$TORCHELASTIC_RESTART_COUNT" -lt 12 ] && exit 3; exec sleep 600')


def pidfds(pid):
    n = 0
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        try:
            if os.readlink(fd) == "anon_inode:[pidfd]":
                n += 1
        except FileNotFoundError:
            pass
    return n


def test_each_attempts_pidfds_are_closed_when_it_ends(sgpu):
    # The backoff doubles from 1 ms: the 12th restart waits 2 s (from 10 ms it was 20 s, 41 s in all).
    p = sgpu.popen("launch", "--nproc", 4, "--max-restarts", 12, "--restart-backoff", "1ms", "--grace", "2s",
                   "--no-python", "sh", "-c", FLAPPING)
    try:
        wait_line(p.stdout, r"attempt 12 pid", timeout=120)
        # The 13th attempt's four ranks hold one pidfd each; the twelve before hold none.
        wait_for(lambda: pidfds(p.pid) <= 4, timeout=10, what="the earlier attempts' pidfds to close")
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)


LEAKED_FDS = (
    "import os\n"
    "names = os.listdir('/proc/self/fd')  # the directory's own descriptor is closed by now\n"
    "leaked = []\n"
    "for fd in names:\n"
    "    try:\n"
    "        leaked.append(f'{fd}={os.readlink(\"/proc/self/fd/\" + fd)}')\n"
    "    except FileNotFoundError:\n"
    "        pass\n"
    "print('fds', os.environ['RANK'], *sorted(leaked))\n"
)


def test_ranks_get_their_own_stdio_and_nothing_else_of_sgpu(sgpu, tmp_path):
    """Children share sgpu's descriptor table for an instant (CLONE_FILES) and keep only their slots: none of
    sgpu's pipes, pidfds or sockets, and no other rank's, crosses; each rank's output is its own."""
    job = tmp_path / "fds.py"
    job.write_text(LEAKED_FDS)
    p = sgpu.run("launch", "--nproc", 24, "--no-python", sys.executable, "-I", "-S", job)
    assert p.returncode == 0, p.stderr
    lines = sorted(line for line in p.stdout.splitlines() if " fds " in line)
    assert len(lines) == 24, p.stdout
    for line in lines:
        prefix, _, rest = line.partition(" fds ")
        rank, *fds = rest.split()
        assert prefix == f"[{rank}]"  # the rank's own pipe, not another's
        assert {fd.split("=")[0] for fd in fds} == {"0", "1", "2"}, line
        assert fds[0].startswith("0=/dev/null") and all("pipe:" in fd for fd in fds[1:]), line


def test_nproc_beyond_the_descriptor_limit_is_refused_before_creating_anything(sgpu, tmp_path):
    home = tmp_path / "sgpu-home"
    res = subprocess.run(["prlimit", "--nofile=20000", sgpu.bin, "launch", "--nproc", "4096", "--no-python",
                          "/bin/true"], env=sgpu.env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "4096 ranks on this node need about" in res.stderr, res.stderr
    assert "20000" in res.stderr, res.stderr
    # Refused before anything was created: no run directory, no rank directories.
    assert not glob.glob(str(home / "runs" / "*" / "ranks" / "*")), os.listdir(home / "runs")


# --- the rendezvous --------------------------------------------------------------

@pytest.fixture
def waiting_node0(sgpu, tmp_path):
    """Node 0 of a two-node static run, waiting for its second node, under a
    low descriptor limit."""
    port = free_port()
    secret = make_secret_file(tmp_path / "secret")
    args = ["launch", "--nnodes", 2, "--node-rank", 0, "--rdzv-endpoint", f"127.0.0.1:{port}",
            "--rdzv-secret-file", secret, "--heartbeat-timeout", "30s", "--join-timeout", "60s",
            "--nproc", 1, "--no-python", "/bin/true"]
    p = subprocess.Popen(["prlimit", "--nofile=64", sgpu.bin, *map(str, args)], env=sgpu.env, cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_until_listening(p, port)
    yield p, port, secret
    if p.poll() is None:
        p.kill()
        p.communicate()


def wait_until_listening(p, port):
    """Waits for node 0 (process p) to listen on port with a socket of its own:
    free_port's port may be taken by another test's process before node 0
    binds it, and a connect would reach that. Fails with node 0's stderr if it
    ended first."""
    wait_for(lambda: p.poll() is not None or _listening_by(p.pid, port), timeout=30, what="node 0 to listen")
    assert p.poll() is None, f"node 0 exited {p.returncode}: {p.communicate()[1]}"


def _listening_by(pid, port):
    """Whether process pid holds a TCP socket listening on port."""
    sockets = set()  # as /proc/PID/fd names them
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                    sockets.add(f"socket:[{fields[9]}]")
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in sockets:
                return True
        except OSError:
            pass
    return False


def test_a_connection_flood_past_the_descriptor_limit_does_not_spin(sgpu, waiting_node0):
    p, port, _ = waiting_node0
    socks = []
    try:
        # More connections than node 0 has descriptors: accept fails with EMFILE.
        for i in range(200):
            try:
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
            except OSError as e:
                state = "running" if p.poll() is None else f"exited {p.returncode}: {p.communicate()[1]}"
                raise AssertionError(f"connection {i}: {e}; node 0 {state}") from e
        before = cpu_seconds(p.pid)
        t0 = time.monotonic()
        wait_for(lambda: time.monotonic() - t0 > 2, timeout=5, what="two seconds of the flood")
        used = cpu_seconds(p.pid) - before
        # Spinning on EMFILE took a whole core (2 s); waiting takes almost nothing.
        assert used < 0.3, used
    finally:
        for s in socks:
            s.close()


def test_too_few_descriptors_for_the_nodes_is_one_line_naming_the_limit(sgpu, tmp_path):
    # Without CAP_SYS_RESOURCE (dropped from the bounding set), as on a user's
    # login node: the hard limit cannot be raised, and 100 nodes need more.
    secret = make_secret_file(tmp_path / "secret")
    args = ["launch", "--nnodes", 100, "--node-rank", 0, "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
            "--rdzv-secret-file", secret, "--nproc", 1, "--no-python", "/bin/true"]
    r = subprocess.run(["setpriv", "--bounding-set", "-sys_resource", "prlimit", "--nofile=64:64", sgpu.bin,
                        *map(str, args)], env=sgpu.env, cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "sgpu: error: --nnodes 100: the launcher holds a connection per node and needs at least 132 open files, "
        "but the hard limit (ulimit -Hn) is 64; raise it (limits.conf, systemd LimitNOFILE)"], r.stderr


def wrong_secret_peer(port):
    with w.connect(port) as s:
        cn = w.nonce()
        s.sendall(w.client_hello(cn))
        kind, payload = w.read_frame(s)
        assert kind == w.SERVER_HELLO
        server_nonce = payload[10:42]
        s.sendall(w.frame(w.AUTH, w.client_proof("not-the-secret" * 4, server_nonce, cn)))
        w.read_until_closed(s, timeout=10)


def test_a_refused_node_is_named_in_the_join_timeout_error(sgpu, tmp_path):
    port = free_port()
    secret = make_secret_file(tmp_path / "secret")
    p = static_node(sgpu, 2, 0, f"127.0.0.1:{port}", secret, "--join-timeout", "3s", "--nproc", 1, "--no-python",
                    "/bin/true")
    try:
        wait_until_listening(p, port)
        for _ in range(5):
            wrong_secret_peer(port)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, err
    error = err[err.index("sgpu: error:"):]
    assert "the rendezvous timed out after 3s" in error, err
    assert "from 127.0.0.1: it does not know the run's secret (5 times)" in error, error
    # Each refusal is not a line of its own: the first, then a count.
    assert err.count("it does not know the run's secret") <= 3, err


def test_refused_unauthenticated_peers_print_one_line_then_a_count(sgpu, tmp_path):
    port = free_port()
    secret = make_secret_file(tmp_path / "secret")
    p = static_node(sgpu, 2, 0, f"127.0.0.1:{port}", secret, "--nproc", 1, "--no-python", "/bin/true")
    try:
        wait_until_listening(p, port)
        for _ in range(20):
            wrong_secret_peer(port)
        a = agent(sgpu, f"127.0.0.1:{port}", secret, "--node-name", "good")
        out, err = p.communicate(timeout=60)
        a.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    refusals = [line for line in err.splitlines() if "refused rendezvous peer" in line]
    assert len(refusals) == 1, err
    assert re.search(r"19 more rendezvous peers? (were )?refused", err), err


# --- kill -9 and stopped ranks ------------------------------------------------------

ESCAPEE = r"""
import os, subprocess, sys, time
out = sys.argv[1]
# A daemon that leaves the rank's group and session, its parent alive...
d = subprocess.Popen(["setsid", "sleep", "600"])
# ...and one double-forked: its parent gone, adopted by sgpu.
r, w = os.pipe()
if os.fork() == 0:
    os.setsid()
    pid = os.fork()
    if pid == 0:
        os.execvp("sleep", ["sleep", "601"])
    os.write(w, str(pid).encode())
    os._exit(0)
os.close(w)
adopted = int(os.read(r, 32))
with open(out + ".tmp", "w") as f:
    f.write(f"{d.pid} {adopted}\n")
os.rename(out + ".tmp", out)
time.sleep(600)
"""


def test_setsid_escapees_die_with_a_killed_sgpu(sgpu, tmp_path):
    job = tmp_path / "escape.py"
    job.write_text(ESCAPEE)
    pidfile = tmp_path / "daemon.pid"
    p = sgpu.popen("launch", "--nproc", 1, job, pidfile)
    try:
        wait_for(pidfile.exists, timeout=60, what="the daemons' pids")
        daemons = [int(x) for x in pidfile.read_text().split()]
        assert all(pid_alive(d) for d in daemons)
        p.kill()
        p.communicate(timeout=30)
        wait_for(lambda: not any(pid_alive(d) for d in daemons), timeout=10,
                 what="the escaped daemons to die with sgpu")
    finally:
        if p.poll() is None:
            p.kill()
        for d in (pidfile.read_text().split() if pidfile.exists() else []):
            try:
                os.kill(int(d), signal.SIGKILL)
            except ProcessLookupError:
                pass


STOPPED = r"""
import os, signal, sys, time
out = sys.argv[1]
with open(out + ".tmp", "w") as f:
    f.write(f"{os.getpid()}\n")
os.rename(out + ".tmp", out)
time.sleep(600)
"""


def test_a_stopped_rank_is_terminated_without_waiting_the_grace(sgpu, tmp_path):
    job = tmp_path / "stopped.py"
    job.write_text(STOPPED)
    pidfile = tmp_path / "rank.pid"
    p = sgpu.popen("launch", "--nproc", 1, "--grace", "60s", job, pidfile)
    try:
        wait_for(pidfile.exists, timeout=60, what="the rank's pid")
        rank = int(pidfile.read_text())
        os.kill(rank, signal.SIGSTOP)
        wait_for(lambda: open(f"/proc/{rank}/stat").read().rsplit(")", 1)[1].split()[0] == "T", timeout=10,
                 what="the rank to stop")
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=90)
        took = time.monotonic() - t0
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err
    assert took < 10, took
    assert "SIGKILL" not in err, err


def test_two_nodes_with_one_hostname_are_told_apart(sgpu, tmp_path):
    port = free_port()
    secret = make_secret_file(tmp_path / "secret")
    prog = ["--nproc", 1, "--no-python", "sh", "-c", 'echo "rank $RANK"']
    n0 = static_node(sgpu, 2, 0, f"127.0.0.1:{port}", secret, *prog)
    n1 = static_node(sgpu, 2, 1, f"127.0.0.1:{port}", secret, *prog)
    o0, e0 = n0.communicate(timeout=60)
    o1, e1 = n1.communicate(timeout=60)
    assert n0.returncode == 0 and n1.returncode == 0, (e0, e1)
    host = socket.gethostname()
    assert sorted(o0.splitlines()) == [f"[{host}#0:0] rank 0", f"[{host}#1:1] rank 1"], o0


def test_a_rank_that_exited_on_its_own_is_not_called_terminated_by_sgpu(sgpu, tmp_path):
    for r in range(2):
        os.mkfifo(tmp_path / f"go-{r}")
    # Each rank fails by itself, with a code of its own, once told to.
    p = sgpu.popen("launch", "--nproc", 2, "-o", "json", "--no-python", "sh", "-c",
                   f'read x < {tmp_path}/go-$RANK; exit $((3 + RANK))')
    try:
        wait_for(lambda: len(proc_children(p.pid)) >= 3, timeout=30, what="both ranks and the guard")
        # sgpu sees the exits only once both happened: the first starts the
        # teardown, and the second had ended before it.
        os.kill(p.pid, signal.SIGSTOP)
        for r in range(2):
            with open(tmp_path / f"go-{r}", "w"):  # returns once rank r reads it
                pass
        wait_for(lambda: sum(1 for s in proc_children(p.pid).values() if s == "Z") >= 2, timeout=30,
                 what="both ranks to exit")
        os.kill(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
    doc = json.loads(out)
    assert sorted(r["exit_code"] for r in doc["ranks"]) == [3, 4], doc["ranks"]
    assert [r["verdict"] for r in doc["ranks"]] == ["failed", "failed"], doc["ranks"]
    assert "terminated by sgpu" not in err, err
