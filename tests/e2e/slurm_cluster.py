"""A real SLURM cluster for the tests: scripts/slurm-cluster started once per
test session in its own directory and on its own ports, so two test runs on
one machine do not meet, and stopped at the end."""
import contextlib
import os
import re
import subprocess

import pytest

from conftest import ROOT, pid_alive
from ports import free_port_block

NODES = 4
GPUS_PER_NODE = 8


class SlurmCluster:
    def __init__(self, state_dir, env):
        self.dir = state_dir
        self.env = env  # SLURM_CONF points at this cluster

    def script(self, *args, timeout=120):
        return subprocess.run([str(ROOT / "scripts" / "slurm-cluster"), *args], env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def run(self, *argv, timeout=60, cwd=None, env=None):
        return subprocess.run(list(map(str, argv)), env=env or self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=cwd or self.dir)

    def popen(self, *argv, env=None, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen(list(map(str, argv)), env=env or self.env, cwd=self.dir, text=True, **kw)

    @contextlib.contextmanager
    def holding(self, *salloc_args, timeout=120):
        """An allocation held for the length of a `with`: yields its job id once
        SLURM grants it, and cancels it on the way out, whatever the test did.
        The grant may come after a "Pending" line: nodes a test just released
        stay COMPLETING until their slurmd has cleaned up. salloc's own
        --immediate bounds the wait; --kill-command ends salloc with its job
        (without it, salloc waits on its command even once the job is gone)."""
        holder = self.popen("salloc", f"--immediate={timeout}", "--kill-command=TERM", *salloc_args, "sleep", "600")
        job, said = None, []
        try:
            for line in holder.stderr:
                said.append(line)
                m = re.search(r"(Pending|Granted) job allocation (\d+)", line)
                job = m.group(2) if m else job
                if m and m.group(1) == "Granted":
                    break
            else:
                raise AssertionError(f"salloc got no grant within {timeout} s: {''.join(said)}")
            yield job
        finally:
            if job:
                self.run("scancel", job)
            else:
                holder.terminate()  # salloc withdraws a request it has not reported yet
            holder.wait(timeout=60)

    def jobs(self):
        out = self.run("squeue", "-h", "-o", "%i %T").stdout
        return dict(line.split() for line in out.splitlines())

    def daemon_pids(self):
        run = self.dir / "run"
        return {p.stem: int(p.read_text()) for p in run.glob("*.pid") if p.read_text().strip()}


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("the SLURM test cluster runs its daemons as root (CI runs as root)")
    state_dir = tmp_path_factory.mktemp("slurm")
    env = dict(os.environ, SGPU_SLURM_DIR=str(state_dir), SGPU_SLURM_PORT=str(free_port_block(NODES + 1)),
               SGPU_SLURM_NODES=str(NODES), SGPU_SLURM_GPUS=str(GPUS_PER_NODE),
               SLURM_CONF=str(state_dir / "slurm.conf"))
    for var in [v for v in env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        del env[var]  # tests run outside any allocation unless they make one
    cluster = SlurmCluster(state_dir, env)
    started = cluster.script("start", timeout=600)
    if started.returncode != 0:
        pytest.fail(f"scripts/slurm-cluster start failed:\n{started.stderr}")
    pids = cluster.daemon_pids()
    yield cluster
    stopped = cluster.script("stop")
    assert stopped.returncode == 0, stopped.stderr
    left = [name for name, pid in pids.items() if pid_alive(pid)]
    assert not left, f"still running after scripts/slurm-cluster stop: {left}"
