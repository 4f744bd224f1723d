"""Time to start 8 ranks on 4 ssh hosts: sgpu --backend ssh against Open MPI's
mpirun with the same hostfile, on real sshd test hosts (tests/e2e/ssh_hosts.py:
network namespaces, needs root).

Each run starts every rank (/bin/true) and waits for all of them to end, so
it measures connection setup, remote start and teardown. Runs alternate
between the tools, the order rotated each round. sgpu is measured cold (no
ControlMaster, a fresh ssh handshake per host, like mpirun) and warm (its
default: a persisted ControlMaster from the previous run). A tool with a
failed run gets no figure.

    scripts/bench-ssh [--runs N]      # this file, printing a summary
    scripts/bench --only multinode    # the same, as section 7 of BENCHMARKS.md
"""
import argparse
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import ssh_hosts  # noqa: E402
from harness import Peer, Row, median, rotated  # noqa: E402

HOSTS, SLOTS = 4, 2
HOSTS_DIR = "$SSH_HOSTS"  # how the reported commands spell the test hosts' scratch directory


def usable():
    """Why this cannot run here (not root, no sshd, ...), or None."""
    return ssh_hosts.usable()


def peers(sgpu, h, hostfile, mpi=True):
    sgpu_argv = [sgpu, "launch", "--backend", "ssh", "--hostfile", str(hostfile), "--nproc", str(SLOTS),
                 "--ssh-config", h.ssh_config()]
    out = [Peer("sgpu, cold ssh", sgpu_argv + ["--ssh-option", "ControlMaster=no", "--no-python", "/bin/true"],
                "sgpu", note="a fresh ssh connection per host, like mpirun"),
           Peer("sgpu, warm ssh", sgpu_argv + ["--ssh-option", f"ControlPath={h.dir}/cm-%C", "--no-python",
                                               "/bin/true"],
                note="its default: the ControlMaster the previous run left")]
    if mpi:
        subnet = h.net.gateway.rsplit(".", 1)[0] + ".0/24"
        out.append(Peer("mpirun", ["mpirun", "--allow-run-as-root", "--hostfile", str(hostfile),
                                   "-np", str(HOSTS * SLOTS),
                                   "--mca", "plm_rsh_agent", f"ssh -F {h.ssh_config()} -o BatchMode=yes",
                                   "--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
                                   "/bin/true"]))
    return out


def timed(argv, env, cwd):
    """(seconds, "") for a run that exits 0, else (None, why)."""
    start = time.perf_counter()
    try:
        res = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=300)
    except subprocess.TimeoutExpired:
        return None, "no exit within 300 s"
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        return None, f"exit {res.returncode}: {(res.stdout + res.stderr).strip()[-300:]}"
    return elapsed, ""


def measure(sgpu, runs, env=None, cwd=None, mpi=True, log=lambda msg: None):
    """Builds the hosts, runs each tool `runs` times; (rows, commands with the scratch directory as $SSH_HOSTS)."""
    bin_dir = os.path.dirname(os.path.abspath(os.path.join(cwd or ".", sgpu)))
    path = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"}  # the hosts find sgpu (its agent) here
    with ssh_hosts.SshHosts(HOSTS, host_env={i: path for i in range(HOSTS)}) as h:
        hostfile = pathlib.Path(h.dir, "hostfile")
        hostfile.write_text("".join(f"{x.addr} slots={SLOTS}\n" for x in h.hosts))
        env = dict(env or os.environ, SGPU_HOME=os.path.join(h.dir, "sgpu-home"), OMP_NUM_THREADS="1")
        rows = [Row(p) for p in peers(sgpu, h, hostfile, mpi)]
        for row in rows:
            if row.peer.name in ("sgpu, warm ssh", "mpirun"):
                # Not counted: the warm run's masters open here, and mpirun's first start pages in Open MPI.
                _, why = timed(row.peer.argv, env, cwd)
                if why:
                    row.fail(f"warm-up run: {why}")
        for i in range(runs):
            for row in rotated(rows, i):
                if row.failure:
                    continue
                seconds, why = timed(row.peer.argv, env, cwd)
                if why:
                    row.fail(why)
                else:
                    row.values.append(seconds)
                log(f"ssh: round {i + 1}/{runs} {row.peer.name}: {why or f'{seconds:.3f} s'}")
        commands = [" ".join(row.peer.argv).replace(h.dir, HOSTS_DIR) for row in rows]
    return rows, commands


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--sgpu", default=str(ROOT / "build" / "apps" / "sgpu" / "sgpu"))
    args = parser.parse_args()
    why = usable()
    if why:
        raise SystemExit(f"bench-ssh: {why}")
    rows, _ = measure(args.sgpu, args.runs)
    print(f"start {HOSTS * SLOTS} ranks on {HOSTS} ssh hosts and wait for them, {args.runs} alternating runs each")
    for row in rows:
        if not row.ok:
            print(f"  {row.peer.name:15s} FAILED: {row.failure}")
            continue
        v = row.values
        print(f"  {row.peer.name:15s} median {median(v) * 1000:7.0f} ms   min {min(v) * 1000:7.0f} ms   "
              f"max {max(v) * 1000:7.0f} ms")
    by_name = {row.peer.name: row for row in rows}
    mpi = by_name.get("mpirun")
    for name in ("sgpu, cold ssh", "sgpu, warm ssh"):
        if mpi and mpi.ok and by_name[name].ok:
            print(f"  mpirun / {name} = {median(mpi.values) / median(by_name[name].values):.2f}x")
    return 0 if all(row.ok for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
