"""11. Ray: `sgpu launch --ray` on two nodes against the same steps by hand (issue 14's target: at most 1.2x).

The figure is the time from the start until the driver's first task has
returned: by hand, `ray start --head --block`, then (once it says it is up)
`ray start --address ... --block`, then the driver with RAY_ADDRESS; with
sgpu, two static nodes on this machine (`--nnodes 2 --node-rank K`). Both
with the same Ray (scripts/venv), alternating."""
import os
import socket
import subprocess
import time

from harness import Peer, Row, median
from python_api import venv_python
from report import Section, fmt_ratio, shell, timing_table

TARGET = 1.2

DRIVER = """
import os, time, ray
ray.init()
@ray.remote
def one():
    return 1
ray.get(one.remote())
print("first task", time.time() - float(os.environ["T0"]), flush=True)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_task(text):
    for line in text.splitlines():
        if "first task" in line:
            return float(line.split()[-1])
    return None


def wait_line(path, what, proc, timeout=120):
    """Until `what` is in the file `path` (ray start's own "it is up"), or its process ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with open(path) as f:
            if what in f.read():
                return True
        time.sleep(0.02)
    return False


def by_hand(ctx, python, driver, work):
    port = free_port()
    env = dict(ctx.env, RAY_USAGE_STATS_ENABLED="0", T0=repr(time.time()))
    ray = [python, "-m", "ray.scripts.scripts", "start", "--num-cpus=1", "--disable-usage-stats", "--block"]
    logs = [os.path.join(work, f"node{k}.log") for k in (0, 1)]
    started = []
    try:
        for k, extra in enumerate([["--head", f"--port={port}", "--node-ip-address=127.0.0.1",
                                    "--include-dashboard=false", f"--temp-dir={work}/ray"],
                                   [f"--address=127.0.0.1:{port}"]]):
            with open(logs[k], "w") as log:
                started.append(subprocess.Popen(ray + extra, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True))
            if not wait_line(logs[k], "Ray runtime started", started[-1]):
                return None, f"ray start (node {k}) did not come up; see {logs[k]}"
        p = subprocess.run([python, driver], env=dict(env, RAY_ADDRESS=f"127.0.0.1:{port}"), capture_output=True,
                           text=True, timeout=300)
        return first_task(p.stdout), p.stderr.strip().splitlines()[-1:] if p.returncode else ""
    finally:
        for proc in started:  # their own sessions only: SIGTERM, then the group
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, 9)
            except OSError:
                pass


def with_sgpu(ctx, python, driver, work):
    secret = os.path.join(work, "secret")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    endpoint = f"127.0.0.1:{free_port()}"
    env = dict(ctx.env, SGPU_PYTHON=python, T0=repr(time.time()))
    common = ["launch", "--ray", "--nnodes", "2", "--rdzv-endpoint", endpoint, "--rdzv-secret-file", secret,
              "--nproc", "1"]
    sgpu = os.path.join(ctx.root, ctx.sgpu)
    n1 = subprocess.Popen([sgpu, *common, "--node-rank", "1", driver], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    n0 = subprocess.run([sgpu, *common, "--node-rank", "0", driver], env=env, capture_output=True, text=True,
                        timeout=300)
    n1.wait(timeout=120)
    return first_task(n0.stdout), "" if n0.returncode == 0 else (n0.stderr.strip().splitlines() or ["failed"])[-1]


def run(ctx):
    s = Section("ray", "11. Ray: sgpu launch --ray against ray start by hand")
    s.intro = ("Time until the driver's first task returns on a two-node Ray cluster (both nodes on this machine): "
               "`sgpu launch --ray --nnodes 2` (static nodes) against `ray start --head`, `ray start --address` "
               "and the driver started by hand, each step once the one before said it was up. Same Ray "
               "(scripts/venv), alternating.")
    if ctx.quick:
        s.skipped = "not in --quick: two Ray clusters take seconds each"
        return s
    python, why = venv_python(ctx)
    if python is None:
        s.skipped = why
        return s
    work = ctx.scratch("ray")
    driver = os.path.join(work, "driver.py")
    with open(driver, "w") as f:
        f.write(DRIVER)
    hand = Row(Peer("ray start by hand", [], "floor"))
    sgpu = Row(Peer("sgpu launch --ray", [], "sgpu"))
    for _ in range(ctx.rounds_for(5)):
        for row, how in ((hand, by_hand), (sgpu, with_sgpu)):
            value, failure = how(ctx, python, driver, ctx.scratch("ray-round"))
            if value is None or failure:
                row.fail(str(failure or "no first task"))
            else:
                row.values.append(value)
    s.table = timing_table([sgpu, hand])
    s.commands = [shell(["sgpu", "launch", "--ray", "--nnodes", "2", "--node-rank", "K", "--rdzv-endpoint",
                         "127.0.0.1:PORT", "--rdzv-secret-file", "secret", "--nproc", "1", "driver.py"])]
    if hand.ok and sgpu.ok:
        r = median(sgpu.values) / median(hand.values)
        verdict = "within" if r <= TARGET else "OVER"
        s.headline.append(("sgpu --ray ÷ by hand, to the first task", f"{fmt_ratio(r)} ({verdict} the {TARGET}x target)"))
    return s
