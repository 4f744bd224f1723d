"""A hostile environment for sgpu's processes and descriptors: ranks that
leave thousands of orphans, restarts, a low descriptor limit, a flood of
connections, refused nodes, escaped daemons after kill -9, stopped ranks."""
import glob
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

FLAPPING = r"""
import os, sys, time
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
print(f"attempt {attempt} pid {os.getpid()}", flush=True)
if attempt < 12:
    sys.exit(3)
time.sleep(600)
"""


def pidfds(pid):
    n = 0
    for fd in glob.glob(f"/proc/{pid}/fd/*"):
        try:
            if os.readlink(fd) == "anon_inode:[pidfd]":
                n += 1
        except FileNotFoundError:
            pass
    return n


def test_each_attempts_pidfds_are_closed_when_it_ends(sgpu, tmp_path):
    job = tmp_path / "flap.py"
    job.write_text(FLAPPING)
    p = sgpu.popen("launch", "--nproc", 4, "--max-restarts", 12, "--restart-backoff", "0.01s", "--grace", "2s", job)
    try:
        wait_line(p.stdout, r"attempt 12 pid", timeout=120)
        # The 13th attempt's four ranks hold one pidfd each; the twelve before hold none.
        wait_for(lambda: pidfds(p.pid) <= 4, timeout=10, what="the earlier attempts' pidfds to close")
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)


def test_nproc_beyond_the_descriptor_limit_is_refused_before_creating_anything(sgpu, tmp_path):
    home = tmp_path / "sgpu-home"
    res = subprocess.run(["prlimit", "--nofile=20000", sgpu.bin, "launch", "--nproc", "4096", "--no-python",
                          "/bin/true"], env=sgpu.env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "4096 ranks on this node need about" in res.stderr, res.stderr
    assert "20000" in res.stderr, res.stderr
    # Refused before anything was created: no run directory, no rank directories.
    assert not glob.glob(str(home / "runs" / "*" / "ranks" / "*")), os.listdir(home / "runs")
