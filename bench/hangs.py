"""11. Hangs: from the hang timeout to the printed verdict, and `sgpu stacks`.

Python ranks print one line, record when (`bench/hang_rank.py`), then sleep:
rank 2 in one function, the others in another. With `--hang-timeout 2s`
sgpu takes every rank's stack (py-spy) when no rank has printed for 2 s, and
prints the grouped report and its verdict. The figure is the time from the
moment the hang timeout expired (the last rank's line plus 2 s) to the
verdict line on sgpu's stderr: 8 ranks on this node, and 2 static nodes of 4
ranks on loopback (the launcher asks each node's agent). Then `sgpu stacks`
of a detached run of 8 and of 64 sleeping Python ranks: the wall time of the
whole command. torchrun, mpirun, srun and DeepSpeed have nothing to compare
(mpirun's `--get-stack-traces` needs gdb and a `--timeout`, and is not
Python-aware), so there is no peer column. Issue 28's aim: under 3 s from the
timeout to the verdict.

Also runnable alone: python3 bench/hangs.py [SGPU].
"""
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import time

from harness import median, spread
from report import Section, fmt_seconds, shell

HANG_S = 2.0
AIM_SECONDS = 3.0


def py_spy_env(env, root):
    venv = subprocess.run([os.path.join(root, "scripts", "venv")], capture_output=True, text=True, check=True)
    env = dict(env)
    env["PATH"] = os.path.join(venv.stdout.strip(), "bin") + os.pathsep + env.get("PATH", "")
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def verdict_delay(procs, stamp, ranks):
    """Seconds from the hang timeout's expiry to the verdict line of procs[0]'s stderr."""
    seen = None
    for line in procs[0].stderr:
        if "verdict:" in line and seen is None:
            seen = time.time()
    for p in procs:
        p.wait(timeout=120)
    if any(p.returncode != 124 for p in procs):
        raise RuntimeError(f"exit codes {[p.returncode for p in procs]}, not 124")
    if seen is None:
        raise RuntimeError("no verdict printed")
    last = max(float(open(f"{stamp}.{r}").read()) for r in range(ranks))
    for f in glob.glob(stamp + ".*"):
        os.remove(f)
    return seen - (last + HANG_S)


def one_node(sgpu, env, root, stamp):
    argv = [sgpu, "launch", "--nproc", "8", "--hang-timeout", f"{HANG_S:g}s", os.path.join(root, "bench", "hang_rank.py")]
    p = subprocess.Popen(argv, env=dict(env, BENCH_STAMP=stamp), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    return verdict_delay([p], stamp, 8), argv


def two_nodes(sgpu, env, root, stamp, work):
    secret = os.path.join(work, "secret")
    with open(secret, "w") as f:
        f.write(os.urandom(32).hex())
    os.chmod(secret, 0o600)
    endpoint = f"127.0.0.1:{free_port()}"
    argv = lambda k: [sgpu, "launch", "--nnodes", "2", "--node-rank", str(k), "--rdzv-endpoint", endpoint,
                      "--rdzv-secret-file", secret, "--nproc", "4", "--hang-timeout", f"{HANG_S:g}s",
                      os.path.join(root, "bench", "hang_rank.py")]
    e = dict(env, BENCH_STAMP=stamp)
    n0 = subprocess.Popen(argv(0), env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    n1 = subprocess.Popen(argv(1), env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    n1.stderr = iter(())
    try:
        return verdict_delay([n0, n1], stamp, 8), argv(0)
    finally:
        for p in (n0, n1):
            if p.poll() is None:
                p.kill()


def stacks_of_detached(sgpu, env, root, ranks, rounds, stamp):
    out = subprocess.run([sgpu, "launch", "--detach", "--nproc", str(ranks), os.path.join(root, "bench", "hang_rank.py")],
                         env=dict(env, BENCH_STAMP=stamp), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"launch --detach: {out.stderr.strip()[-300:]}")
    run_id = out.stdout.strip()
    try:
        deadline = time.monotonic() + 120
        while len(glob.glob(stamp + ".*")) < ranks:
            if time.monotonic() > deadline:
                raise RuntimeError("the ranks did not start")
            time.sleep(0.1)
        walls = []
        argv = [sgpu, "stacks", run_id, "-o", "json"]
        for _ in range(rounds + 1):
            t0 = time.monotonic()
            res = subprocess.run(argv, env=env, capture_output=True, text=True)
            walls.append(time.monotonic() - t0)
            if res.returncode != 0:
                raise RuntimeError(f"sgpu stacks: {res.stderr.strip()[-300:]}")
            doc = json.loads(res.stdout)
            if doc["odd_ones_out"] != [2] or any(r["error"] for r in doc["ranks"]):
                raise RuntimeError(f"sgpu stacks read {doc['verdict']!r}")
        return walls[1:], [sgpu, "stacks", "RUN"]
    finally:
        subprocess.run([sgpu, "cancel", run_id], env=env, capture_output=True)
        for f in glob.glob(stamp + ".*"):
            os.remove(f)


def run(ctx):
    s = Section("hangs", "11. Hangs: hang timeout to verdict, and `sgpu stacks`")
    s.intro = __doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0].replace("\n", " ")
    rounds = ctx.rounds_for(3)
    env = py_spy_env(dict(ctx.env, SGPU_HOME=ctx.scratch("hangs-home")), ctx.root)
    stamp = os.path.join(ctx.work, "hang-stamp")
    rows, commands = [], []
    try:
        cases = [("8 ranks, this node: timeout -> verdict", lambda: one_node(ctx.sgpu, env, ctx.root, stamp))]
        if not ctx.quick:
            cases.append(("2 nodes x 4 ranks (static, loopback): timeout -> verdict",
                          lambda: two_nodes(ctx.sgpu, env, ctx.root, stamp, ctx.work)))
        for name, case in cases:
            values = []
            for _ in range(rounds):
                value, argv = case()
                values.append(value)
            rows.append((name, values))
            commands.append(shell(argv))
        for ranks in ([8] if ctx.quick else [8, 64]):
            walls, argv = stacks_of_detached(ctx.sgpu, env, ctx.root, ranks, rounds, stamp)
            rows.append((f"sgpu stacks, {ranks} Python ranks (detached run)", walls))
            commands.append(shell(argv))
    except (RuntimeError, ValueError, OSError, subprocess.SubprocessError) as e:
        s.skipped = f"sgpu failed: {e}"
        s.sgpu_failure = s.skipped
        return s
    s.table = [["what", "median", "spread (min - max)", "runs"]]
    for name, values in rows:
        lo, hi = spread(values)
        s.table.append([name, fmt_seconds(median(values)), f"{fmt_seconds(lo)} - {fmt_seconds(hi)}", str(len(values))])
    worst = max(median(v) for n, v in rows if "verdict" in n)
    s.headline = [("hang timeout -> verdict (8 ranks)", f"{fmt_seconds(median(rows[0][1]))} (aim < {AIM_SECONDS:g} s)")]
    s.notes.append(f"Slowest median from the timeout to the verdict: {fmt_seconds(worst)}; aim: under {AIM_SECONDS:g} s.")
    s.commands = commands
    return s


if __name__ == "__main__":
    from peers import Context, base_env
    import tempfile
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    work = tempfile.mkdtemp(prefix="sgpu-bench-")
    sgpu = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build/apps/sgpu/sgpu")
    ctx = Context(root=root, sgpu=sgpu, work=work, quick=False, rounds=0, env=base_env(work), output_mib=0)
    print(run(ctx).compact())
    shutil.rmtree(work, ignore_errors=True)
