"""--cpu-bind and --report-bindings: each rank reads back, from /proc/self/status,
the CPUs the kernel lets it run on; the dry run shows the plan on hwloc's
synthetic 2 sockets x 2 NUMA nodes x 16 cores machine with 8 fake GPUs."""
import json
import os
import pathlib
import re
import subprocess

import pytest

from conftest import newest_summary, sgpu_bin
from slurm_cluster import slurm_cluster  # noqa: F401 (fixture)

# Each rank writes what the kernel says of it to $SGPU_RESULT_FILE.
RANK = """
import json, os
status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
with open(os.environ["SGPU_RESULT_FILE"], "w") as f:
    json.dump({"cpus": sorted(os.sched_getaffinity(0)), "list": status["Cpus_allowed_list"].strip(),
               "omp": os.environ.get("OMP_NUM_THREADS")}, f)
"""

ALLOWED = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs 2 CPUs")


def cores_of(cpus):
    """How many distinct cores hold `cpus` (what OMP_NUM_THREADS should be)."""
    cores = set()
    for cpu in cpus:
        topo = pathlib.Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        cores.add(((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip()))
    return len(cores)


def run_ranks(sgpu, *args, env=None, prefix=()):
    program = pathlib.Path(sgpu.cwd) / "rank.py"
    program.write_text(RANK)
    cmd = [*prefix, sgpu.bin, "launch", *args, str(program)]
    res = subprocess.run(cmd, env=env or sgpu.env, cwd=sgpu.cwd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    summary = newest_summary(env or sgpu.env)
    return res, summary, summary["results"]


@needs_two_cpus
def test_core_gives_each_rank_one_core_of_its_own(sgpu):
    res, _, ranks = run_ranks(sgpu, "--cpu-bind", "core", "--nproc", "2")
    assert [len(r["cpus"]) for r in ranks] == [1, 1], ranks
    assert ranks[0]["cpus"] != ranks[1]["cpus"]
    assert all(set(r["cpus"]) <= set(ALLOWED) for r in ranks)
    assert [r["list"] for r in ranks] == [str(r["cpus"][0]) for r in ranks]
    assert [r["omp"] for r in ranks] == ["1", "1"]


def test_none_leaves_every_rank_the_whole_set(sgpu):
    _, summary, ranks = run_ranks(sgpu, "--nproc", "2")
    assert [r["cpus"] for r in ranks] == [ALLOWED, ALLOWED]
    assert [r["omp"] for r in ranks] == ["1", "1"]  # unchanged: sgpu's default without a binding
    assert "binding" not in summary["ranks"][0]


def test_omp_num_threads_follows_the_binding_unless_set(sgpu):
    _, _, ranks = run_ranks(sgpu, "--cpu-bind", "numa", "--nproc", "1")
    assert ranks[0]["cpus"], ranks
    assert ranks[0]["omp"] == str(cores_of(ranks[0]["cpus"]))
    _, _, ranks = run_ranks(sgpu, "--cpu-bind", "numa", "--nproc", "1", env=dict(sgpu.env, OMP_NUM_THREADS="3"))
    assert ranks[0]["omp"] == "3"


@needs_two_cpus
def test_ranks_stay_within_the_cpus_sgpu_was_given(sgpu):
    # What a SLURM step or a cgroup does to sgpu, taskset does here: one CPU.
    mine = ALLOWED[-1]
    res, _, ranks = run_ranks(sgpu, "--cpu-bind", "core", "--nproc", "2", "--report-bindings",
                              prefix=("taskset", "-c", str(mine)))
    assert [r["cpus"] for r in ranks] == [[mine], [mine]], ranks
    assert f"sgpu: rank 1: cores {mine}," in res.stderr


@needs_two_cpus
def test_report_bindings_on_the_console_in_events_and_in_the_summary(sgpu):
    res, summary, ranks = run_ranks(sgpu, "--cpu-bind", "core", "--nproc", "2", "--report-bindings")
    lines = [line for line in res.stderr.splitlines() if line.startswith("sgpu: rank ")]
    assert len(lines) == 2, res.stderr
    for rank, (line, result) in enumerate(zip(lines, ranks)):
        assert line.startswith(f"sgpu: rank {rank}: cores {result['list']}, NUMA node "), line
        assert summary["ranks"][rank]["binding"]["cpus"] == result["list"]
        assert summary["ranks"][rank]["binding"]["bound"] is True
    run_dir = pathlib.Path(summary["run_dir"])
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    bindings = [e for e in events if e["event"] == "rank_binding"]
    assert [(e["rank"], e["cpus"]) for e in bindings] == [(r, ranks[r]["list"]) for r in range(2)]


def test_report_bindings_without_binding_says_so(sgpu):
    res, _, _ = run_ranks(sgpu, "--nproc", "1", "--report-bindings")
    assert f"sgpu: rank 0: cores {cpu_list(ALLOWED)}, not bound" in res.stderr


def cpu_list(cpus):
    out, i = [], 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        out.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(out)


def test_exclusive_with_more_ranks_than_cores_fails_before_any_rank_starts(sgpu, tmp_path):
    marker = tmp_path / "started"
    res = sgpu.run("launch", "--cpu-bind", "exclusive", "--nproc", str(len(ALLOWED) + 1), "--no-python", "--",
                   "touch", str(marker))
    assert res.returncode != 0
    assert "--cpu-bind exclusive: " in res.stderr and "each rank needs a core of its own" in res.stderr, res.stderr
    assert not marker.exists()


@pytest.fixture
def eight_fake_gpus(sgpu):
    """hwloc's synthetic 2x2x16 machine and a fake NVML with 8 GPUs, two per NUMA node."""
    nvml = pathlib.Path(os.environ.get("SGPU_FAKE_GPU_LIBS", pathlib.Path(sgpu_bin()).parents[2] / "tests" / "fake_gpu"))
    nvml = nvml / "nvml"
    if not (nvml / "libnvidia-ml.so.1").exists():
        pytest.fail(f"{nvml}/libnvidia-ml.so.1 is missing: build the tests (scripts/build) or set SGPU_FAKE_GPU_LIBS")
    sgpu.env.update(LD_LIBRARY_PATH=str(nvml), SGPU_FAKE_DRIVER_GPUS="8", SGPU_FAKE_DRIVER_NUMA="0,0,1,1,2,2,3,3",
                    SGPU_TEST_HWLOC_TOPOLOGY="pack:2 numa:2 core:16 pu:1")
    (pathlib.Path(sgpu.cwd) / "train.py").write_text("")
    return sgpu


def test_dry_run_shows_each_mode_on_the_synthetic_topology(eight_fake_gpus):
    sgpu = eight_fake_gpus
    expected = {
        "numa": "rank 3 (GPU 3): cores 16-31, NUMA node 1",
        "node": "rank 3 (GPU 3): cores 16-31, NUMA node 1",  # torchrun's name
        "socket": "rank 3 (GPU 3): cores 0-31, NUMA node 1",
        "core": "rank 3 (GPU 3): cores 17, NUMA node 1",
        "exclusive": "rank 3 (GPU 3): cores 24-31, NUMA node 1",
    }
    for mode, line in expected.items():
        res = sgpu.run("launch", "--dry-run", "--gpus", "8", "--cpu-bind", mode, "train.py")
        assert res.returncode == 0, res.stderr
        assert f"\n    {line}\n" in res.stdout, res.stdout
    res = sgpu.run("launch", "--dry-run", "--gpus", "8", "--cpu-bind", "exclusive", "-o", "json", "train.py")
    doc = json.loads(res.stdout)
    assert doc["cpu_bind"] == "exclusive"
    assert [r["binding"]["cpus"] for r in doc["ranks"]] == [f"{8 * k}-{8 * k + 7}" for k in range(8)]
    assert [r["binding"]["numa_node"] for r in doc["ranks"]] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert all(r["env"]["OMP_NUM_THREADS"] == "8" for r in doc["ranks"])


def test_a_topology_hwloc_cannot_read_is_an_error(eight_fake_gpus):
    sgpu = eight_fake_gpus
    res = sgpu.run("launch", "--dry-run", "--gpus", "8", "--cpu-bind", "numa", "train.py",
                   env=dict(sgpu.env, SGPU_TEST_HWLOC_TOPOLOGY="pack:two"))
    assert res.returncode == 2
    assert "--cpu-bind numa: SGPU_TEST_HWLOC_TOPOLOGY=pack:two: hwloc cannot read" in res.stderr, res.stderr


AFFINITY = """
import json, os, sys
with open(os.path.join(os.environ["OUT_DIR"], f"aff-{os.environ['RANK']}.json"), "w") as f:
    json.dump({"node": os.environ.get("SLURMD_NODENAME"), "cpus": sorted(os.sched_getaffinity(0)),
               "omp": os.environ.get("OMP_NUM_THREADS")}, f)
"""


@needs_two_cpus
@pytest.mark.xdist_group("slurm")  # the worker that holds the session's SLURM cluster
def test_each_slurm_node_binds_its_own_ranks(slurm_cluster, sgpu_env, tmp_path):  # noqa: F811 (the fixture)
    # The SLURM test cluster (scripts/slurm-cluster) binds nothing itself
    # (task/none); each node's agent binds its ranks with its own topology.
    cluster = slurm_cluster
    out = tmp_path / "out"
    out.mkdir()
    program = tmp_path / "aff.py"
    program.write_text(AFFINITY)
    env = dict(sgpu_env, SLURM_CONF=cluster.env["SLURM_CONF"], OUT_DIR=str(out))
    for var in [v for v in env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        del env[var]
    res = cluster.run("salloc", "-N2", sgpu_bin(), "launch", "--nproc", "2", "--cpu-bind", "core",
                      "--report-bindings", program, env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    ranks = [json.loads((out / f"aff-{r}.json").read_text()) for r in range(4)]
    assert [len(r["cpus"]) for r in ranks] == [1, 1, 1, 1], ranks
    for node in (ranks[:2], ranks[2:]):
        assert node[0]["node"] == node[1]["node"] and node[0]["cpus"] != node[1]["cpus"]
    assert {r["omp"] for r in ranks} == {"1"}
    # Each node's agent says its own, in the run's slurm.log (where the agents' stderr goes).
    log = (pathlib.Path(newest_summary(env)["run_dir"]) / "slurm.log").read_text()
    reported = re.findall(r"sgpu: (\S+): rank (\d): cores (\d+), NUMA node", log)
    assert sorted((int(rank), node, [int(cpu)]) for node, rank, cpu in reported) == \
        [(r, ranks[r]["node"], ranks[r]["cpus"]) for r in range(4)], log


def numa_nodes():
    return sorted(p.name for p in pathlib.Path("/sys/devices/system/node").glob("node[0-9]*"))


@pytest.mark.skipif(numa_nodes() != ["node0"], reason="needs a machine with one NUMA node")
def test_gpu_ranks_are_bound_to_their_gpus_numa_node_as_nvml_says(eight_fake_gpus):
    # The real launch path on this machine's topology, the GPUs' NUMA node from the fake NVML.
    sgpu = eight_fake_gpus
    env = dict(sgpu.env, SGPU_FAKE_DRIVER_GPUS="2", SGPU_FAKE_DRIVER_NUMA="0,0")
    del env["SGPU_TEST_HWLOC_TOPOLOGY"]
    res, summary, ranks = run_ranks(sgpu, "--gpus", "2", "--cpu-bind", "numa", "--report-bindings", env=env)
    assert [r["cpus"] for r in ranks] == [ALLOWED, ALLOWED]
    assert [r["omp"] for r in ranks] == [str(cores_of(ALLOWED))] * 2
    for rank in range(2):
        assert f"sgpu: rank {rank} (GPU {rank}): cores {cpu_list(ALLOWED)}, NUMA node 0\n" in res.stderr, res.stderr
        assert summary["ranks"][rank]["binding"]["numa_node"] == 0
