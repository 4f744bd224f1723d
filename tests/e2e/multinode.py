"""Helpers for multi-node tests: a rendezvous port, a secret, static nodes
and agents started as real sgpu processes."""
import os
import socket
import time

from conftest import pid_alive

HEARTBEAT = "2s"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_secret_file(path):
    path.write_text(os.urandom(32).hex() + "\n")
    path.chmod(0o600)
    return path


def static_node(sgpu, nnodes, node_rank, endpoint, secret_file, *args, env=None, **kw):
    return sgpu.popen("launch", "--nnodes", nnodes, "--node-rank", node_rank, "--rdzv-endpoint", endpoint,
                      "--rdzv-secret-file", secret_file, "--heartbeat-timeout", HEARTBEAT, *args, env=env, **kw)


def agent(sgpu, endpoint, secret_file, *args, env=None, **kw):
    env = dict(env or sgpu.env)
    env["SGPU_RDZV_SECRET"] = secret_file.read_text().strip()
    return sgpu.popen("agent", "--rdzv", endpoint, *args, env=env, **kw)


def wait_for(predicate, timeout=30, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def read_pids(out, ranks, timeout=30):
    def ready():
        return all((out / f"pid-{r}").exists() and (out / f"pid-{r}").read_text().strip() for r in ranks)
    wait_for(ready, timeout, f"pid files of ranks {ranks}")
    return [int((out / f"pid-{r}").read_text()) for r in ranks]


def all_dead(pids, timeout=5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        time.sleep(0.05)
    return not any(pid_alive(p) for p in pids)
