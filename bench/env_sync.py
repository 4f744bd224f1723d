"""14. --sync-env: the job's Python environment on 2 ssh hosts.

A --system-site-packages venv with 20 packages (wheels made by hand,
tests/e2e/wheels.py; pip and setuptools come with the venv), on two ssh test
hosts with homes of their own (tests/e2e/ssh_hosts.py). Three figures, each
a launch of one rank per host running an empty script and waiting for it:
- the first launch with --sync-env (every wheel and uv shipped, the
  environment built on both hosts), measured once per round on fresh homes;
- a later launch with --sync-env (the hosts have it: nothing shipped);
- the same launch without --sync-env, the baseline.
The aim (issue 34): the cached launch under 100 ms more than the baseline.

    /usr/bin/python3 bench/env_sync.py [--runs N]     # standalone
    scripts/bench --only env_sync                      # section 14 of BENCHMARKS.md
"""
import argparse
import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT / "tests" / "e2e"))  # after bench/: its multinode.py is not the tests'
import ssh_hosts  # noqa: E402
from harness import Peer, Row, median, rotated  # noqa: E402
from report import Section, fmt_seconds  # noqa: E402
from wheels import make_wheel  # noqa: E402

PACKAGES = 20
HOSTS_DIR = "$SSH_HOSTS"


def make_env(root):
    venv = root / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(venv)], check=True)
    wheels = [make_wheel(root / "dist", f"bench_pkg_{i}", "1.0", f"VALUE = {i}\n") for i in range(PACKAGES)]
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
                    "--disable-pip-version-check", *map(str, wheels)], check=True)
    (root / "empty.py").write_text("")
    return venv / "bin" / "python", root / "empty.py"


def timed(argv, env):
    import ssh_start  # here, not above: it puts tests/e2e first on sys.path, whose multinode.py is not bench's
    return ssh_start.timed(argv, env, None)  # (seconds, "") or (None, why), as the ssh start figures are taken


def uv_binary():
    venv = os.environ.get("SGPU_VENV") or subprocess.run([str(ROOT / "scripts" / "venv")], capture_output=True,
                                                         text=True, check=True).stdout.strip()
    return os.path.join(venv, "bin", "uv")


def measure(sgpu, runs, env=None, log=lambda msg: None):
    work = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"sgpu-bench-env-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        python, script = make_env(work / "job")
        homes = [work / f"home{i}" for i in range(2)]
        bin_dir = os.path.dirname(os.path.abspath(sgpu))
        host_env = {i: {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin", "HOME": str(h)} for i, h in enumerate(homes)}
        with ssh_hosts.SshHosts(2, host_env=host_env) as h:
            env = dict(env or os.environ, SGPU_HOME=str(work / "sgpu-home"), XDG_CACHE_HOME=str(work / "cache"),
                       SGPU_UV=uv_binary(), OMP_NUM_THREADS="1")
            base = [sgpu, "launch", "--backend", "ssh", "--hosts", ",".join(x.addr for x in h.hosts), "--nproc", "1",
                    "--ssh-config", h.ssh_config(), "--ssh-option", f"ControlPath={h.dir}/cm-%C",
                    "--python", str(python)]
            rows = [Row(Peer("sgpu, no --sync-env", base + [str(script)], "sgpu",
                             note="the baseline: the same launch, the hosts' own interpreter")),
                    Row(Peer("sgpu --sync-env, cached", base + ["--sync-env", str(script)],
                             note="the hosts have the environment: nothing shipped")),
                    Row(Peer("sgpu --sync-env, first", base + ["--sync-env", str(script)],
                             note=f"{PACKAGES + 2} wheels and uv shipped, the environment built on both hosts"))]
            # Not counted: the ControlMasters open, and the launcher's wheel cache fills.
            for row in rows[:2]:
                _, why = timed(row.peer.argv, env)
                if why:
                    row.fail(f"warm-up run: {why}")
            for i in range(runs):
                for row in rotated(rows, i):
                    if row.failure:
                        continue
                    if row is rows[2]:  # fresh homes: the hosts have nothing (the launcher keeps its wheels)
                        for home in homes:
                            shutil.rmtree(home / ".cache", ignore_errors=True)
                    seconds, why = timed(row.peer.argv, env)
                    if why:
                        row.fail(why)
                    else:
                        row.values.append(seconds)
                    if row is rows[2]:  # the next cached run must find it: build it again, uncounted
                        timed(rows[1].peer.argv, env)
                    log(f"env_sync: round {i + 1}/{runs} {row.peer.name}: {why or f'{seconds:.3f} s'}")
            commands = [" ".join(r.peer.argv).replace(h.dir, HOSTS_DIR).replace(str(work), "$WORK") for r in rows[:2]]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows, commands


def run(ctx):
    s = Section("env_sync", "14. --sync-env: the job's Python environment on 2 ssh hosts")
    s.intro = (f"One rank on each of 2 ssh test hosts runs an empty script with a --system-site-packages venv of "
               f"{PACKAGES} packages (plus the venv's pip and setuptools): the first launch with `--sync-env` (wheels "
               "and uv shipped, the environment built on both hosts with uv), a later one (nothing shipped), and "
               "the same launch without `--sync-env`. Aim: the cached launch under 100 ms more than the baseline.")
    why = ssh_hosts.usable()
    if why:
        s.skipped = why
        return s
    runs = ctx.rounds or (1 if ctx.quick else 5)
    rows, commands = measure(ctx.sgpu, runs, env=ctx.env, log=ctx.log)
    table = [["launch", "median", "spread (min - max)", "runs", "more than the baseline", "what"]]
    base = rows[0]
    for row in rows:
        if not row.ok:
            table.append([row.peer.name, "FAILED", row.failure[:80], "-", "-", row.peer.note])
            s.sgpu_failure = s.sgpu_failure or f"{row.peer.name}: {row.failure}"
            continue
        more = (f"+{(median(row.values) - median(base.values)) * 1000:.0f} ms" if base.ok and row is not base else "-")
        table.append([row.peer.name, fmt_seconds(median(row.values)),
                      f"{fmt_seconds(min(row.values))} - {fmt_seconds(max(row.values))}", str(len(row.values)), more,
                      row.peer.note])
    s.table = table
    s.commands += commands
    s.notes.append(f"{runs} rounds, the order rotated each round; one unmeasured run of each first (it opens the "
                   "ControlMasters and fills the launcher's wheel cache). Before each first-launch run both hosts' "
                   "caches are removed. `$SSH_HOSTS` is the test hosts' scratch directory, `$WORK` the job's venv.")
    if base.ok and rows[1].ok:
        s.headline.append(("--sync-env, cached, more than without",
                           f"+{(median(rows[1].values) - median(base.values)) * 1000:.0f} ms (aim: under 100 ms)"))
    return s


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sgpu", default=str(ROOT / "build" / "apps" / "sgpu" / "sgpu"))
    args = parser.parse_args()
    why = ssh_hosts.usable()
    if why:
        raise SystemExit(f"env_sync: {why}")
    rows, _ = measure(args.sgpu, args.runs, log=print)
    for row in rows:
        if row.ok:
            print(f"  {row.peer.name:26s} median {median(row.values) * 1000:7.0f} ms  "
                  f"min {min(row.values) * 1000:7.0f}  max {max(row.values) * 1000:7.0f}")
        else:
            print(f"  {row.peer.name:26s} FAILED: {row.failure}")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
