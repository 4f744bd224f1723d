"""10. Tracking: what an MLflow run costs. 8 ranks of /bin/true under sgpu with
and without tracking against a real local `mlflow server`, beside MLflow's own
Python client doing mlflow.start_run()/end_run() in the same rounds."""
import json
import os
import subprocess
import sys

from harness import Peer, Row, describe_exit, median, run_once, tail
from peers import alternate, sgpu
from report import Section, fmt_seconds, shell, timing_table

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from mlflow_server import MlflowServer, venv_python  # noqa: E402

N = 8
BUDGET_S = 0.050  # issue 13: tracking may add at most 50 ms to start-to-exit
PY_RUNS = 5  # start_run()/end_run() pairs per Python process, after a first untimed one

PY_CLIENT = """
import json, sys, time, mlflow
mlflow.start_run(); mlflow.end_run()  # connection, experiment look-up: not timed
times = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter(); mlflow.start_run(); mlflow.end_run(); times.append(time.perf_counter() - t0)
print(json.dumps(times))
"""


def one_launch(ctx, row):
    out, err = os.path.join(ctx.work, "tracking.out"), os.path.join(ctx.work, "tracking.err")
    run = run_once(row.peer.argv, row.peer.env, ctx.root, out, err, timeout=120)
    with open(err, errors="replace") as f:
        stderr = f.read()
    if run.returncode != 0 or run.timed_out:
        row.fail(f"{describe_exit(run.returncode)}: {tail(err)}")
    elif row.peer.name == "sgpu, tracked" and ("sgpu: mlflow run " not in stderr or "warning" in stderr):
        row.fail(f"the run was not tracked: {tail(err)}")
    else:
        row.values.append(run.wall)


def python_client(ctx, row):
    p = subprocess.run([venv_python(), "-c", PY_CLIENT, str(PY_RUNS)], env=row.peer.env, cwd=ctx.work,
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        row.fail(f"{describe_exit(p.returncode)}: {p.stderr.strip()[-300:]}")
        return
    row.values += json.loads(p.stdout.strip().splitlines()[-1])  # MLflow prints run links before it


def run(ctx):
    s = Section("tracking", "10. Tracking: an MLflow run per launch")
    s.intro = (f"sgpu's start-to-exit for {N} ranks of `/bin/true` with tracking on (`--mlflow`: the run is created "
               "with its tags before the ranks start; at the end the params with the metrics (a job under 1 s), "
               "the artifact summary.json (a job that succeeds within a second sends no spec.json and "
               "events.jsonl: the summary holds the same; rank 0's logs are empty, so not uploaded) and the "
               "status, all awaited before sgpu exits) and off (`--no-mlflow`), "
               "against a real `mlflow server` on loopback (sqlite store, artifact proxy, one worker), in "
               "alternating rounds. Beside it, MLflow's own Python client in the same rounds: one "
               f"`mlflow.start_run()` + `mlflow.end_run()` pair timed inside a Python process ({PY_RUNS} per "
               "round, after an untimed first pair that pays the connection and the experiment look-up).")
    if ctx.quick:
        s.skipped = "not in --quick: a new MLflow server takes tens of seconds to start (scripts/bench --only tracking)"
        return s
    try:
        server = MlflowServer(os.path.join(ctx.work, "mlflow"), start_timeout=300).__enter__()
    except (OSError, RuntimeError, subprocess.CalledProcessError) as e:
        s.skipped = f"no MLflow server: {e} (scripts/venv installs mlflow)"
        return s
    try:
        ctx.log(f"tracking: mlflow server up in {server.startup_s:.1f}s")
        base = dict(ctx.env)
        for name in list(base):
            if name.startswith("MLFLOW_"):
                del base[name]
        tracked_env = dict(base, **server.client_env())
        rows = [Row(Peer("sgpu, tracked", [*sgpu(ctx, N), "--mlflow", server.url, "--no-python", "/bin/true"],
                         "sgpu", tracked_env)),
                Row(Peer("sgpu, untracked", [*sgpu(ctx, N), "--no-mlflow", "--no-python", "/bin/true"], "peer",
                         base)),
                Row(Peer("python: start_run()+end_run()", ["python", "-c", "..."], "peer", tracked_env))]
        runs = 10

        def one(row, i):
            if row.peer.name.startswith("python"):
                python_client(ctx, row)
            else:
                for _ in range(runs):
                    one_launch(ctx, row)

        alternate(ctx, "tracking", rows, ctx.rounds_for(3), one)
        s.table = timing_table(rows)
        on, off, py = rows
        if on.ok and off.ok:
            added = median(on.values) - median(off.values)
            s.headline.append(("tracking's cost, 8 ranks of /bin/true", f"+{fmt_seconds(added)}"))
            verdict = "PASS" if added <= BUDGET_S else "FAIL"
            s.notes.append(f"Tracking adds {fmt_seconds(added)} to the median start-to-exit (budget "
                           f"{fmt_seconds(BUDGET_S)}): **{verdict}**.")
            if py.ok:
                s.notes.append(f"One start_run()+end_run() pair in MLflow's Python client: "
                               f"{fmt_seconds(median(py.values))} (median), against the "
                               f"{fmt_seconds(added)} sgpu's whole run record adds.")
        if not on.ok:
            s.sgpu_failure = on.failure
        s.notes.append(f"mlflow server start-up (new sqlite store, migrations): {server.startup_s:.1f}s.")
        s.commands = [shell(rows[0].peer.argv), shell(rows[1].peer.argv),
                      shell([venv_python(), "-c", "<start_run()/end_run() timed>", str(PY_RUNS)])]
    finally:
        server.stop()
    return s
