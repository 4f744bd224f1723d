"""16. Spare nodes (--spares): from a lost node to the next attempt's ranks
all running on a spare, against a plain restart on the same nodes.

Real sshd test hosts (tests/e2e/ssh_hosts.py: network namespaces, needs
root), 2 ranks of `/bin/sh` on each of 2 nodes, --max-restarts 1,
--restart-backoff 1ms (its least). Two rows:
- plain restart: rank 2 (node 1's first) exits 1 in attempt 0 and the others
  wait; attempt 1 runs on the same 2 hosts. Measured from that rank's
  rank_exited to attempt 1's last rank_started (events.jsonl).
- a lost node on a spare (--spares 1, a third host held idle): once every
  rank of attempt 0 runs, node 1's agent is killed (SIGKILL); attempt 1 runs
  on host A and the spare, whose agent starts only then (ssh, the
  rendezvous's readmission). Measured from the kill (this script's clock) to
  attempt 1's last rank_started.

    /usr/bin/python3 bench/spares.py [--runs N]   # standalone, as root
    scripts/bench --only spares                  # section 16 of BENCHMARKS.md
"""
import argparse
import datetime
import json
import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import ssh_hosts  # noqa: E402
from harness import Peer, Row, median, rotated  # noqa: E402
from health_gate import table_of  # noqa: E402
from report import Section, fmt_seconds  # noqa: E402

JOB = ('echo up; if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
       '[ "$RANK" = 2 ] && [ -n "$FAIL" ] && exit 1; exec sleep 60; fi')


def stamp(event):
    return datetime.datetime.strptime(event["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def events_of(home):
    run = max((home / "runs").glob("*/events.jsonl"), key=lambda p: p.stat().st_mtime)
    return [json.loads(line) for line in run.read_text().splitlines()]


def all_running(events, attempt):
    return max(stamp(e) for e in events if e["event"] == "rank_started" and e["attempt"] == attempt)


def one_run(argv, env, hosts, lose_node):
    """Seconds from the failure to attempt 1's ranks all running, or (None, why)."""
    p = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    lost_at = None
    try:
        if lose_node:
            ups = 0
            for line in p.stdout:
                ups += line.rstrip().endswith("up")
                if ups == 4:
                    break
            pids = hosts.hosts[1].agent_pids()
            if not pids:
                p.kill()
                return None, "no agent on host B"
            lost_at = time.time()
            os.kill(pids[0], signal.SIGKILL)
        _, err = p.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        return None, "timed out"
    if p.returncode != 0:
        return None, f"exit {p.returncode}: {err.strip()[-200:]}"
    events = events_of(pathlib.Path(env["SGPU_HOME"]))
    if lost_at is None:
        lost_at = min(stamp(e) for e in events if e["event"] == "rank_exited" and e["attempt"] == 0)
    return all_running(events, 1) - lost_at, ""


def measure(sgpu, runs, log=lambda msg: None):
    work = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"sgpu-bench-spares-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    bin_dir = str(pathlib.Path(sgpu).resolve().parent)
    with_sgpu = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"}
    try:
        with ssh_hosts.SshHosts(3, host_env={k: with_sgpu for k in range(3)}) as hosts:
            names = [h.addr for h in hosts.hosts]
            base = [sgpu, "launch", "--backend", "ssh", "--ssh-config", hosts.ssh_config(), "--ssh-option",
                    f"ControlPath={hosts.dir}/cm-%C", "--nproc", "2", "--max-restarts", "1", "--restart-backoff",
                    "1ms", "--grace", "5s"]
            rows = [Row(Peer("plain restart", base + ["--hosts", ",".join(names[:2]), "-x", "FAIL=1",
                                                      "--no-python", "/bin/sh", "-c", JOB], "sgpu",
                             note="rank 2 exits 1; attempt 1 on the same 2 hosts")),
                    Row(Peer("lost node, on a spare", base + ["--hosts", ",".join(names), "--nnodes", "2",
                                                              "--spares", "1", "--no-python", "/bin/sh", "-c", JOB],
                             note="node 1's agent killed; attempt 1 on host A and the spare, started then"))]
            env = {k: v for k, v in os.environ.items()}
            env["SGPU_HOME"] = str(work / "home")
            for i in range(runs + 1):  # the first round opens the ControlMasters and is not counted
                for row in rotated(rows, i):
                    seconds, why = one_run(row.peer.argv, env, hosts, row is rows[1])
                    if why:
                        row.fail(why)
                    elif i > 0:
                        row.values.append(seconds)
                log(f"spares: round {i}/{runs}")
            commands = [shlex.join(r.peer.argv).replace(hosts.dir, "$SSH_HOSTS") for r in rows]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows, commands


def run(ctx):
    s = Section("spares", "16. Spare nodes: a lost node replaced, against a plain restart")
    s.intro = ("From a failure to the next attempt's ranks all running: a plain restart on the same 2 ssh hosts "
               "(a rank failed), and a restart where node 1 was lost (its agent killed) and a spare host held by "
               "`--spares 1` takes its place (issue 32). The spare's agent starts only when it is needed.")
    why = ssh_hosts.usable()
    if why:
        s.skipped = f"not measured on this machine: {why}"
        return s
    runs = ctx.rounds or (2 if ctx.quick else 10)
    rows, commands = measure(ctx.sgpu, runs, log=ctx.log)
    s.table = table_of(rows, "from the failure")
    s.commands = commands
    s.notes.append(f"{runs} rounds after one uncounted, the order rotated each round; 2 ranks of `/bin/sh -c '{JOB}'` "
                   "on each of 2 nodes, `--restart-backoff 1ms`. The plain restart is timed from the failed rank's "
                   "rank_exited event, the lost node from the moment this script killed its agent; both to attempt "
                   "1's last rank_started (events.jsonl). `$SSH_HOSTS` is the test hosts' scratch directory.")
    failed = next((r for r in rows if not r.ok), None)
    if failed:
        s.sgpu_failure = f"{failed.peer.name}: {failed.failure}"
        return s
    s.headline.append(("a lost node replaced by a spare, failure to ranks running",
                       f"{fmt_seconds(median(rows[1].values))} (plain restart "
                       f"{fmt_seconds(median(rows[0].values))})"))
    return s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--sgpu", default=str(ROOT / "build" / "apps" / "sgpu" / "sgpu"))
    args = parser.parse_args()
    rows, _ = measure(args.sgpu, args.runs, log=print)
    for row in table_of(rows, "from the failure"):
        print("  ".join(row))


if __name__ == "__main__":
    main()
