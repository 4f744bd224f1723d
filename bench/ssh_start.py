"""Time to start 8 ranks on 4 ssh hosts: sgpu --backend ssh against Open MPI's
mpirun with the same hostfile, on real sshd test hosts (tests/e2e/ssh_hosts.py).

Each run starts every rank (/bin/true) and waits for all of them to end, so
it measures connection setup, remote start and teardown. Runs alternate
between the tools; the summary gives medians and the ratio. sgpu is measured
cold (no ControlMaster, a fresh ssh handshake per host, like mpirun) and warm
(its default: a persisted ControlMaster from the previous run).

    scripts/bench-ssh [--runs N]
"""
import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
import ssh_hosts  # noqa: E402

HOSTS, SLOTS = 4, 2


def timed(argv, env):
    start = time.perf_counter()
    res = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    if res.returncode != 0:
        raise SystemExit(f"failed ({res.returncode}): {' '.join(argv)}\n{res.stdout}\n{res.stderr}")
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--sgpu", default=str(ROOT / "build" / "apps" / "sgpu" / "sgpu"))
    args = parser.parse_args()
    why = ssh_hosts.usable()
    if why:
        raise SystemExit(f"bench-ssh: {why}")
    bin_dir = os.path.dirname(os.path.abspath(args.sgpu))
    path = {"PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"}
    with ssh_hosts.SshHosts(HOSTS, host_env={i: path for i in range(HOSTS)}) as h:
        hostfile = pathlib.Path(h.dir, "hostfile")
        hostfile.write_text("".join(f"{x.addr} slots={SLOTS}\n" for x in h.hosts))
        env = dict(os.environ, SGPU_HOME=os.path.join(h.dir, "sgpu-home"), OMP_NUM_THREADS="1")
        sgpu = [args.sgpu, "launch", "--backend", "ssh", "--hostfile", str(hostfile), "--nproc", str(SLOTS),
                "--ssh-config", h.ssh_config()]
        cold = sgpu + ["--ssh-option", "ControlMaster=no", "--no-python", "/bin/true"]
        warm = sgpu + ["--ssh-option", f"ControlPath={h.dir}/cm-%C", "--no-python", "/bin/true"]
        subnet = h.net.gateway.rsplit(".", 1)[0] + ".0/24"
        mpirun = (["mpirun", "--allow-run-as-root", "--hostfile", str(hostfile), "-np", str(HOSTS * SLOTS),
                              "--mca", "plm_rsh_agent", f"ssh -F {h.ssh_config()} -o BatchMode=yes",
                              "--mca", "oob_tcp_if_include", subnet,
                   "--mca", "btl_tcp_if_include", subnet, "/bin/true"])
        times = {"sgpu cold": [], "sgpu warm": [], "mpirun": []}
        timed(warm, env)  # opens the masters that the warm runs reuse
        timed(mpirun, env)
        for _ in range(args.runs):
            times["sgpu cold"].append(timed(cold, env))
            times["sgpu warm"].append(timed(warm, env))
            times["mpirun"].append(timed(mpirun, env))
    print(f"start {HOSTS * SLOTS} ranks on {HOSTS} ssh hosts and wait for them, {args.runs} alternating runs each")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in times.items():
        print(f"  {k:10s} median {med[k] * 1000:7.0f} ms   min {min(v) * 1000:7.0f} ms   max {max(v) * 1000:7.0f} ms")
    print(f"  mpirun / sgpu cold = {med['mpirun'] / med['sgpu cold']:.2f}x   "
          f"mpirun / sgpu warm = {med['mpirun'] / med['sgpu warm']:.2f}x")


if __name__ == "__main__":
    main()
