"""The one-machine SLURM cluster (scripts/slurm-cluster) is a real one: jobs
span nodes, allocations hold resources, and GPUs are scheduled as GRES."""
import pytest

from conftest import pid_alive
from slurm_cluster import GPUS_PER_NODE, NODES, slurm_cluster  # noqa: F401 (fixture)

# One worker holds the session's SLURM cluster (under pytest-xdist, a session
# fixture is made once a worker); the Ray tests look for Ray processes machine-wide.
pytestmark = pytest.mark.xdist_group("slurm")


def test_status_lists_every_node_idle_with_its_gpus(slurm_cluster):
    res = slurm_cluster.script("status")
    assert res.returncode == 0, res.stderr
    for name in ["munged", "slurmctld"] + [f"slurmd-node{n}" for n in range(1, NODES + 1)]:
        assert f"{name}: running" in res.stdout
    nodes = slurm_cluster.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T %G").stdout.split("\n")
    assert sorted(filter(None, nodes)) == [f"node{n} idle gpu:{GPUS_PER_NODE}" for n in range(1, NODES + 1)]


def test_srun_runs_one_task_on_each_node(slurm_cluster):
    res = slurm_cluster.run("srun", f"-N{NODES}", "--ntasks-per-node=1", "printenv", "SLURMD_NODENAME")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == [f"node{n}" for n in range(1, NODES + 1)]


def test_salloc_holds_nodes_and_gpus_for_its_steps_and_releases_them(slurm_cluster):
    step = "echo $SLURMD_NODENAME $SLURM_JOB_NODELIST $SLURM_TASKS_PER_NODE $SLURM_STEP_GPUS $CUDA_VISIBLE_DEVICES"
    res = slurm_cluster.run("salloc", "-N2", "--gpus-per-node=2", "srun", "--ntasks-per-node=1", "bash", "-c", step)
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.splitlines())
    assert len(lines) == 2, res.stdout
    nodelist = lines[0].split()[1]
    for line in lines:
        node, job_nodes, tasks, step_gpus, visible = line.split()
        assert job_nodes == nodelist and tasks == "1(x2)"
        assert len(step_gpus.split(",")) == 2 and visible == step_gpus
    job = res.stderr.split("Granted job allocation ")[1].split()[0]
    assert f"Relinquishing job allocation {job}" in res.stderr
    assert slurm_cluster.jobs().get(job) in (None, "COMPLETING")


def test_gpus_are_scheduled_not_shared(slurm_cluster):
    # One job holds 5 of node3's GPUs; the next gets the other 3, and while
    # the first holds its 5, 4 are not there to be had.
    holder = slurm_cluster.popen("salloc", "-w", "node3", "--gpus-per-node=5", "srun", "bash", "-c",
                                 "echo $SLURM_JOB_ID $CUDA_VISIBLE_DEVICES && exec sleep 600")
    job = None
    try:
        line = holder.stdout.readline().split()
        assert len(line) == 2, holder.stderr.read()
        job, held = line[0], set(line[1].split(","))
        second = slurm_cluster.run("srun", "-w", "node3", "--gpus-per-node=3", "printenv", "CUDA_VISIBLE_DEVICES")
        assert second.returncode == 0, second.stderr
        got = set(second.stdout.strip().split(","))
        assert len(held) == 5 and len(got) == 3 and not held & got
        assert held | got == {str(g) for g in range(GPUS_PER_NODE)}
        full = slurm_cluster.run("srun", "-w", "node3", "--immediate=1", "--gpus-per-node=4", "true")
        assert full.returncode != 0
        assert "Unable to allocate resources" in full.stderr
    finally:
        if job:
            slurm_cluster.run("scancel", job)  # salloc ignores SIGTERM; the allocation ends it
        else:
            holder.kill()
        holder.wait(timeout=60)


def test_more_gpus_than_a_node_has_is_refused(slurm_cluster):
    res = slurm_cluster.run("srun", f"--gpus-per-node={GPUS_PER_NODE + 1}", "true")
    assert res.returncode != 0
    assert "Requested node configuration is not available" in res.stderr


def test_fail_node_kills_everything_on_that_node_and_start_brings_it_back(slurm_cluster):
    job = slurm_cluster.popen("srun", "-w", "node[1-2]", "--kill-on-bad-exit=0", "bash", "-c",
                              "echo $SLURM_JOB_ID $SLURMD_NODENAME $$; exec sleep 600")
    try:
        lines = [job.stdout.readline().split() for _ in range(2)]
        pids = {node: int(pid) for _, node, pid in lines}
        failed = slurm_cluster.script("fail-node", "node2")
        assert failed.returncode == 0, failed.stderr
        assert not pid_alive(pids["node2"]) and pid_alive(pids["node1"])
        assert not pid_alive(slurm_cluster.daemon_pids()["slurmd-node2"])
    finally:
        slurm_cluster.run("scancel", lines[0][0])
        job.wait(timeout=60)
    back = slurm_cluster.script("start")
    assert back.returncode == 0, back.stderr
    nodes = slurm_cluster.run("sinfo", "-h", "-N", "-p", "debug", "-o", "%N %T").stdout.split("\n")
    assert sorted(filter(None, nodes)) == [f"node{n} idle" for n in range(1, NODES + 1)]
