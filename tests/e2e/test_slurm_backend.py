"""sgpu launch --backend slurm against the real one-machine cluster
(scripts/slurm-cluster): inside an allocation, asking SLURM for one, and the
faults SLURM brings (scancel, a node failing, SLURM's own time limit)."""
import json
import os
import pathlib
import re
import select
import signal
import subprocess
import time

import pytest

from conftest import ROOT, assert_one_exit_code, newest_summary, pid_alive, python_program, sgpu_bin, wait_for_files
from slurm_cluster import GPUS_PER_NODE, slurm_cluster  # noqa: F401 (fixture)

# One worker holds the session's SLURM cluster (under pytest-xdist, a session
# fixture is made once a worker); the Ray tests look for Ray processes machine-wide.
pytestmark = pytest.mark.xdist_group("slurm")


@pytest.fixture(scope="module", autouse=True)
def time_limited_run(slurm_cluster, tmp_path_factory):
    """SLURM's time limits are whole minutes and it checks them every 30 s, so
    the job it kills starts with this module, on node4, beside the other
    tests, and its test comes last."""
    home = tmp_path_factory.mktemp("time-limit")
    env = dict(os.environ, SGPU_HOME=str(home), SLURM_CONF=slurm_cluster.env["SLURM_CONF"])
    for var in [v for v in env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        del env[var]
    proc = subprocess.Popen(["salloc", "-w", "node4", "-t", "1", "-J", "sgpu-time-limit-test", sgpu_bin(), "launch", "--nproc", "1", "--grace", "5s",
                             "--no-python", "sleep", "600"], env=env, cwd=home, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    yield proc, time.monotonic(), home
    if proc.poll() is None:  # its test did not run (-k): end the job, not just salloc
        subprocess.run(["scancel", "-n", "sgpu-time-limit-test"], env=env, check=False)
        proc.communicate(timeout=60)


@pytest.fixture
def cluster_env(slurm_cluster, sgpu_env):
    """sgpu's test environment pointed at the cluster; every node "has" 8 H100s
    (the documented fake, since the machine has none), SLURM says which."""
    env = dict(sgpu_env, SLURM_CONF=slurm_cluster.env["SLURM_CONF"], SGPU_FAKE_GPUS=f"{GPUS_PER_NODE}xH100")
    for var in [v for v in env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        del env[var]
    return env


def sgpu_cmd(sgpu, *args):
    return [sgpu.bin, *map(str, args)]


def read_envs(out_dir):
    envs = [json.loads(p.read_text()) for p in out_dir.glob("env-*.json")]
    return sorted(envs, key=lambda e: int(e["RANK"]))


def job_state(slurm_cluster, job):
    out = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", job, "-o", "%T %l").stdout.strip()
    return out.split() if out else ["GONE", ""]


def job_of(stderr):
    m = re.search(r"SLURM job (\d+)", stderr)
    assert m, stderr
    return m.group(1)


def processes_with(marker):
    """Live processes whose environment carries this test's marker."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker.encode() in f.read().split(b"\0"):
                    found.append(int(pid))
        except OSError:
            pass
    return [p for p in found if pid_alive(p)]


def no_rank_left(marker, within=10):
    """What is still running with the marker `within` seconds from now. A
    node's slurmstepd may still be killing what it tracks as sgpu returns
    (SLURM ends the step on its own schedule): wait on their exits (pidfds),
    not on a clock."""
    pids = processes_with(marker)
    poller = select.poll()
    fds = {}
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue
        fds[fd] = pid
        poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + within
    try:
        while fds and time.monotonic() < deadline:
            for fd, _ in poller.poll(max(1, int((deadline - time.monotonic()) * 1000))):
                poller.unregister(fd)
                os.close(fd)
                del fds[fd]
    finally:
        for fd in fds:
            os.close(fd)
    return [p for p in pids if pid_alive(p)]


def test_inside_an_allocation_one_agent_per_node_and_slurms_gpus(slurm_cluster, cluster_env, sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(cluster_env, OUT_DIR=str(out))
    res = slurm_cluster.run("salloc", "-N2", "--gpus-per-node=2", *sgpu_cmd(sgpu, "launch", python_program("dump_env.py")),
                            env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    envs = read_envs(out)
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3"]
    nodelist = envs[0]["SLURM_JOB_NODELIST"]
    first, second = sorted({e["SLURMD_NODENAME"] for e in envs}, key=lambda n: int(n[4:]))
    assert nodelist == f"{first[:4]}[{first[4:]}-{second[4:]}]" or nodelist == f"{first},{second}"
    for e in envs:
        rank = int(e["RANK"])
        # node 0 is the allocation's first node; each node runs one rank per GPU SLURM gave it
        assert e["SLURMD_NODENAME"] == (first if rank < 2 else second)
        assert e["NODE_RANK"] == e["GROUP_RANK"] == str(rank // 2)
        assert e["LOCAL_RANK"] == str(rank % 2) and e["WORLD_SIZE"] == "4" and e["LOCAL_WORLD_SIZE"] == "2"
        assert e["NNODES"] == "2"
        # the GPUs SLURM allocated to the step on that node, as SLURM numbered them
        assert e["CUDA_VISIBLE_DEVICES"] == e["SLURM_STEP_GPUS"] and len(e["SLURM_STEP_GPUS"].split(",")) == 2
        assert e["SGPU_GPU_TYPE"] == "H100"
        # SLURM's task variables agree with torchrun's, for code that reads them
        assert e["SLURM_PROCID"] == e["RANK"] and e["SLURM_LOCALID"] == e["LOCAL_RANK"]
        assert e["SLURM_NTASKS"] == "4" and e["SLURM_NODEID"] == e["NODE_RANK"]
        assert "SGPU_RDZV_SECRET" not in e
    assert envs[0]["MASTER_ADDR"] == envs[3]["MASTER_ADDR"] and envs[0]["MASTER_PORT"] == envs[3]["MASTER_PORT"]
    # Each node reached MASTER_ADDR before its ranks started; the interface it
    # did so through is in the summary and pins its ranks' NCCL and gloo sockets.
    routes = newest_summary(env)["spec"]["routes"]
    assert [r["node"] for r in routes] == [first, second], routes
    for e in envs:
        interface = routes[int(e["NODE_RANK"])]["interface"]
        assert interface and e["NCCL_SOCKET_IFNAME"] == e["GLOO_SOCKET_IFNAME"] == interface, (routes, e)


def test_nproc_cpu_is_resolved_on_each_node(slurm_cluster, cluster_env, sgpu, tmp_path):
    # Every node "has" 8 GPUs (SGPU_FAKE_GPUS): torchrun's --nproc cpu must
    # still mean that node's CPUs, counted where the ranks run.
    out = tmp_path / "out"
    out.mkdir()
    env = dict(cluster_env, OUT_DIR=str(out))
    res = slurm_cluster.run("salloc", "-N2", *sgpu_cmd(sgpu, "launch", "--nproc", "cpu", python_program("dump_env.py")),
                            env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    envs = read_envs(out)
    cpus = os.cpu_count()
    assert len(envs) == 2 * cpus
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {str(cpus)}
    assert {e["WORLD_SIZE"] for e in envs} == {str(2 * cpus)}


def test_dry_run_inside_an_allocation_shows_its_nodes(slurm_cluster, cluster_env, sgpu, tmp_path):
    res = slurm_cluster.run("salloc", "-w", "node[1-2]",
                            *sgpu_cmd(sgpu, "launch", "--dry-run", "-o", "json", "--nproc", 1, "--no-python", "true"),
                            env=cluster_env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["backend"] == "slurm"
    hosts = [n["host"] for n in doc["nodes"]]
    assert len(hosts) == 2 and hosts[0].startswith("node1 ") and hosts[1].startswith("node2 "), hosts
    assert doc["master_addr"] == "node1"
    assert [r["env"]["NODE_RANK"] for r in doc["ranks"]] == ["0", "1"]


def test_include_and_exclude_choose_the_nodes_inside_an_allocation_and_for_a_new_one(slurm_cluster, cluster_env,
                                                                                      sgpu, tmp_path):
    res = slurm_cluster.run("salloc", "-w", "node[1-3]",
                            *sgpu_cmd(sgpu, "launch", "--dry-run", "-o", "json", "--nproc", 1, "--exclude", "node2",
                                      "--no-python", "true"),
                            env=cluster_env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [n["host"].split()[0] for n in doc["nodes"]] == ["node1", "node3"], doc["nodes"]
    assert "nodes left out by --include/--exclude: node2" in doc["notes"], doc["notes"]
    # A new allocation: salloc --exclude, and the job runs elsewhere.
    res = subprocess.run(sgpu_cmd(sgpu, "launch", "--backend", "slurm", "--nodes", 2, "--nproc", 1, "--exclude",
                                  "node[1-2]", "--no-python", "true"),
                         env=cluster_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    running_on = expand_nodes(re.search(r"SLURM job \d+ is running on (\S+)", res.stderr).group(1))
    assert len(running_on) == 2 and not {"node1", "node2"} & set(running_on), running_on
    res = subprocess.run(sgpu_cmd(sgpu, "launch", "--backend", "slurm", "--nodes", 2, "--nproc", 1, "--exclude",
                                  "node1:1", "--no-python", "true"),
                         env=cluster_env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "leaves out whole nodes ('node1'), not GPUs" in res.stderr, res.stderr


def final_loss(text):
    m = re.findall(r"final loss (\d+\.\d+)", text)
    assert m, text
    return m[-1]


def test_ddp_across_slurm_nodes_matches_one_node(slurm_cluster, cluster_env, sgpu, tmp_path):
    script = str(ROOT / "examples" / "ddp_mlp.py")
    one = subprocess.run(sgpu_cmd(sgpu, "launch", "--backend", "local", "--nproc", 4, script, "--epochs", 2),
                         env=cluster_env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    two = slurm_cluster.run("salloc", "-N2", *sgpu_cmd(sgpu, "launch", "--nproc", 2, script, "--epochs", 2),
                            env=cluster_env, cwd=tmp_path, timeout=300)
    assert two.returncode == 0, two.stderr
    assert final_loss(two.stdout) == final_loss(one.stdout)


def test_a_new_allocation_is_pending_then_running_then_released(slurm_cluster, cluster_env, sgpu, tmp_path):
    # Every GPU of nodes 1-3 is taken: 2 nodes with 8 GPUs each must wait.
    out = tmp_path / "out"
    out.mkdir()
    env = dict(cluster_env, OUT_DIR=str(out))
    with slurm_cluster.holding("-w", "node[1-3]", f"--gpus-per-node={GPUS_PER_NODE}") as held:
        proc = subprocess.Popen(sgpu_cmd(sgpu, "launch", "--backend", "slurm", "--nodes", 2, "--gpus-per-node",
                                         GPUS_PER_NODE, "--timeout", "5m", "--grace", "10s",
                                         python_program("dump_env.py")),
                                env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            lines = []
            for line in proc.stderr:  # sgpu says so as soon as SLURM does
                lines.append(line)
                if "PENDING (Resources)" in line:
                    break
            assert any("is pending" in l for l in lines), lines
            job = job_of("".join(lines))
            assert job_state(slurm_cluster, job) == ["PENDING", "7:00"]  # 5m + 10s grace + 1m to start, rounded up
            slurm_cluster.run("scancel", held)
            _, rest = proc.communicate(timeout=120)
        finally:
            proc.kill()
    err = "".join(lines) + rest
    assert proc.returncode == 0, err
    assert re.search(rf"SLURM job {job} is running on node", err), err
    assert len(read_envs(out)) == 2 * GPUS_PER_NODE
    assert job_state(slurm_cluster, job)[0] in ("COMPLETING", "COMPLETED")  # released, not left to its time limit


def test_a_failure_in_a_new_allocation_releases_it_with_the_exit_code(slurm_cluster, cluster_env, sgpu, tmp_path):
    script = 'if [ "$RANK" = 2 ]; then exit 3; fi; exec sleep 600'
    res = subprocess.run(sgpu_cmd(sgpu, "launch", "--backend", "slurm", "--nodes", 2, "--nproc", 2, "--grace", "5s",
                                  "--no-python", "sh", "-c", script),
                         env=cluster_env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert res.returncode == 3, res.stderr
    assert_one_exit_code(3, home=cluster_env)
    # rank 2 is node 1's first rank: on the allocation's second node
    second = re.search(r"SLURM job \d+ is running on (\S+)", res.stderr).group(1)
    assert re.search(r"rank 2 \((node\d)\) failed first: exit 3\b.*\(exit code 3\)", res.stderr), res.stderr
    assert re.search(r"rank 2 \((node\d)\)", res.stderr).group(1) == expand_nodes(second)[1], res.stderr
    job = job_of(res.stderr)
    assert job_state(slurm_cluster, job)[0] == "FAILED"
    info = slurm_cluster.run("scontrol", "show", "job", job).stdout
    assert "ExitCode=3:0" in info


def expand_nodes(text):
    """node[1-2] or node1,node2 -> [node1, node2] (the forms the test cluster's lists take)."""
    m = re.fullmatch(r"node\[(\d+)-(\d+)\]", text)
    if m:
        return [f"node{n}" for n in range(int(m.group(1)), int(m.group(2)) + 1)]
    return text.split(",")


def test_a_rank_failing_inside_an_allocation_names_its_node_and_gives_its_code(slurm_cluster, cluster_env, sgpu,
                                                                              tmp_path):
    script = 'if [ "$RANK" = 3 ]; then exit 7; fi; exec sleep 600'
    res = slurm_cluster.run("salloc", "-w", "node[1-2]", *sgpu_cmd(sgpu, "launch", "--nproc", 2, "--grace", "5s",
                                                                   "--no-python", "sh", "-c", script),
                            env=cluster_env, cwd=tmp_path, timeout=120)
    assert res.returncode == 7, res.stderr
    assert re.search(r"rank 3 \(node2\) failed first: exit 7\b.*\(exit code 7\)", res.stderr), res.stderr


def test_restarts_inside_an_allocation_start_every_node_again(slurm_cluster, cluster_env, sgpu, tmp_path):
    # Rank 1 (the second node) fails on attempt 0; the same srun step's agents
    # start their ranks again on the launcher's word.
    out = tmp_path / "out"
    out.mkdir()
    env = dict(cluster_env, OUT_DIR=str(out), FAIL_UNTIL="1", FAIL_RANK="1")
    res = slurm_cluster.run("salloc", "-N2", *sgpu_cmd(sgpu, "launch", "--nproc", 1, "--max-restarts", 1,
                                                       "--restart-backoff", "50ms", python_program("restart_job.py")),
                            env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in out.glob("seen-*")) == ["seen-0-0.txt", "seen-0-1.txt", "seen-1-0.txt",
                                                          "seen-1-1.txt"]
    assert "restart 1 of 1 in 50ms" in res.stderr
    summary = newest_summary(env)
    assert [(a["status"], a["exit_code"]) for a in summary["attempts"]] == [("rank_failed", 3), ("completed", 0)]


def test_ctrl_c_releases_the_allocation_and_leaves_nothing(slurm_cluster, cluster_env, sgpu, tmp_path):
    marker = f"SGPU_TEST_MARK={os.getpid()}-{time.monotonic_ns()}"
    env = dict(cluster_env, SGPU_TEST_MARK=marker.split("=", 1)[1])
    proc = subprocess.Popen(sgpu_cmd(sgpu, "launch", "--backend", "slurm", "--nodes", 2, "--nproc", 2, "--no-python",
                                     "sh", "-c", 'echo "up $RANK"; exec sleep 600'),
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    for line in proc.stdout:  # every rank runs before the interrupt
        m = re.search(r"\bup (\d+)", line)
        if m:
            seen.add(m.group(1))
        if len(seen) == 4:
            break
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT" in err
    # Released: COMPLETING while slurmd cleans up, then COMPLETED (or gone from squeue).
    assert job_state(slurm_cluster, job_of(err))[0] in ("COMPLETING", "COMPLETED", "FAILED", "GONE")
    assert no_rank_left(marker) == []


def test_scancel_tears_down_everywhere_and_says_so(slurm_cluster, cluster_env, sgpu, tmp_path):
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    env = dict(cluster_env, SGPU_TEST_MARK=marker)
    proc = slurm_cluster.popen("salloc", "-N2", *sgpu_cmd(sgpu, "launch", "--nproc", 2, "--grace", "5s",
                                                          "--no-python", "sh", "-c",
                                                          'echo "up $RANK $SLURM_JOB_ID"; exec sleep 600'),
                               env=env)
    job = None
    seen = set()
    for line in proc.stdout:
        m = re.search(r"\bup (\d+) (\d+)", line)
        if m:
            seen.add(m.group(1))
            job = m.group(2)
        if len(seen) == 4:
            break
    slurm_cluster.run("scancel", job)
    _, err = proc.communicate(timeout=60)
    # SLURM signals every process of the step, a rank or an agent first; the
    # root cause is what SLURM did, and its code is SIGTERM's.
    assert re.search(r"SLURM job \d+ was cancelled \(scancel\).*\(exit code 143\)", err), err
    assert proc.returncode == 143, err
    assert_one_exit_code(143, home=env)
    assert newest_summary(env)["status"] == "preempted"
    assert no_rank_left(f"SGPU_TEST_MARK={marker}") == []



def test_scancel_lets_every_rank_on_both_nodes_checkpoint_and_ends_preempted(slurm_cluster, cluster_env, sgpu,
                                                                           tmp_path):
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    out = tmp_path / "out"
    out.mkdir()
    env = dict(cluster_env, SGPU_TEST_MARK=marker, OUT_DIR=str(out), CKPT_SECONDS="1")
    proc = slurm_cluster.popen("salloc", "-N2", *sgpu_cmd(sgpu, "launch", "--nproc", 2, "--grace", "20s", "--python",
                                                          "/usr/bin/python3", python_program("checkpoint.py")),
                               env=env)
    wait_for_files(out, "ready-*", 4)
    res = slurm_cluster.run("scancel", (out / "ready-0").read_text())
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 143, err + res.stderr
    assert newest_summary(env)["status"] == "preempted", err
    for r in range(4):
        assert (out / f"ckpt-{r}").exists(), f"rank {r}: {err}"
        assert (out / f"events-{r}").read_text().split()[0] == "SIGTERM"
    assert no_rank_left(f"SGPU_TEST_MARK={marker}") == []


@pytest.mark.alone  # the signal is due 15 s into a 1-minute allocation: a busy machine starts the job later
def test_signal_before_counts_back_from_the_allocation_s_end_on_both_nodes(slurm_cluster, cluster_env, sgpu,
                                                                         tmp_path):
    # SLURM's shortest limit is a minute; the signal comes 45 s before its end.
    out = tmp_path / "out"
    out.mkdir()
    env = dict(cluster_env, OUT_DIR=str(out), EXIT_ON="SIGUSR2")
    t0 = time.time()
    res = slurm_cluster.run("salloc", "-N2", "-t", "1", *sgpu_cmd(sgpu, "launch", "-o", "json", "--nproc", 2,
                                                                  "--signal-before", "USR2@45s", "--python",
                                                                  "/usr/bin/python3", python_program("checkpoint.py")),
                            env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    sent = json.loads(res.stdout)["signal_before"]
    assert sent and sent["sent_at"], sent
    deadline = newest_summary(env)["signal_before"]["deadline"]
    end = time.mktime(time.strptime(deadline[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
    assert t0 + 50 < end < t0 + 70, (deadline, t0)  # SLURM's end of the allocation, not --timeout's 3h
    for r in range(4):
        got = (out / f"events-{r}").read_text().split()
        assert got[0] == "SIGUSR2" and len(got) == 2, got  # once
        assert abs(float(got[1]) - (end - 45)) < 2, (got, end)


def test_a_node_failing_mid_run_is_named_and_stops_the_rest(slurm_cluster, cluster_env, sgpu, tmp_path):
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    env = dict(cluster_env, SGPU_TEST_MARK=marker)
    proc = slurm_cluster.popen("salloc", "-w", "node[1-2]", *sgpu_cmd(sgpu, "launch", "--nproc", 2, "--grace", "5s",
                                                                      "--no-python", "sh", "-c",
                                                                      'echo "up $RANK"; exec sleep 600'),
                               env=env)
    try:
        seen = set()
        for line in proc.stdout:
            m = re.search(r"\bup (\d+)", line)
            if m:
                seen.add(m.group(1))
            if len(seen) == 4:
                break
        t0 = time.monotonic()
        failed = slurm_cluster.script("fail-node", "node2")
        assert failed.returncode == 0, failed.stderr
        _, err = proc.communicate(timeout=120)
        assert time.monotonic() - t0 < 30, err  # sgpu notices at once, not at SLURM's node timeout
        assert "node node2 was lost" in err, err
        assert proc.returncode != 0
        assert_one_exit_code(proc.returncode, home=env)
        assert no_rank_left(f"SGPU_TEST_MARK={marker}") == []
    finally:
        proc.kill()
        back = slurm_cluster.script("start")
        assert back.returncode == 0, back.stderr


def test_slurms_time_limit_ends_the_job_with_124(time_limited_run):
    # Started with the module (see time_limited_run); SLURM ends it 60-90 s later.
    proc, started, home = time_limited_run
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 124, err
    assert_one_exit_code(124, home=home)
    assert newest_summary(home)["status"] == "stopped_by_scheduler"
    assert re.search(r"SLURM's time limit ended job \d+.*\(exit code 124\)", err), err
    assert 55 < time.monotonic() - started < 200
    # What a user compares with sgpu's code: slurm.log keeps srun's lines (how
    # SLURM saw each node's agent end) and how the srun step itself ended. SLURM
    # signals a step's tasks SIGTERM, SIGCONT, SIGTERM: every agent waits out
    # the repeat for the launcher's verdict, and srun ends as its agents did.
    log = (pathlib.Path(newest_summary(home)["run_dir"]) / "slurm.log").read_text()
    agents = re.findall(r"^srun: error: (\S+): tasks? [\d,-]+: (.*)$", log, re.M)
    assert agents == [("node4", "Exited with exit code 124")], log
    assert re.findall(r"^sgpu: srun exited: (.*)$", log, re.M) == ["exit 124"], log


def test_preflight_inside_an_allocation_checks_every_nodes_gpus_first(slurm_cluster, cluster_env, sgpu, tmp_path):
    # The fake driver libraries (not SGPU_FAKE_GPUS) on every node, through
    # srun's environment: each node's agent runs its workers on the GPUs SLURM
    # gave the step, and node 0's NCCL id reaches node 1 through sgpu.
    from test_doctor import fake_libs
    dirs = fake_libs()
    out = tmp_path / "out"
    out.mkdir()
    env = dict(cluster_env, OUT_DIR=str(out), SGPU_FAKE_DRIVER_GPUS=str(GPUS_PER_NODE), SGPU_FAKE_NCCL_DIR=str(tmp_path),
               LD_LIBRARY_PATH=os.pathsep.join(str(dirs[n]) for n in ("cuda", "nccl", "nvml")))
    del env["SGPU_FAKE_GPUS"]
    args = ["--preflight", "--set", "preflight.max_bytes=64K", "--set", "preflight.iters=2",
            python_program("dump_env.py")]
    res = slurm_cluster.run("salloc", "-N2", "--gpus-per-node=2", *sgpu_cmd(sgpu, "launch", *args), env=env,
                            cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert re.search(r"^sgpu: preflight: 4 GPUs on 2 nodes healthy in \d+\.\ds", res.stderr, re.M), res.stderr
    assert [e["RANK"] for e in read_envs(out)] == ["0", "1", "2", "3"]
    report = json.loads(pathlib.Path(newest_summary(env)["run_dir"], "preflight.json").read_text())
    assert len({g["node"] for g in report["gpus"]}) == 2
    assert all(len(s["rank_time_us"]) == 4 for s in report["allreduce"]["sizes"])

    # A wrong sum on the second node's second GPU: no rank starts, and the
    # allocation's step ends with the verdict's code.
    env["SGPU_FAKE_NCCL_WRONG"] = "3"
    for p in out.iterdir():
        p.unlink()
    res = slurm_cluster.run("salloc", "-N2", "--gpus-per-node=2", *sgpu_cmd(sgpu, "launch", *args), env=env,
                            cwd=tmp_path, timeout=120)
    assert res.returncode == 1, res.stderr
    assert re.search(r"preflight: failed in \d+\.\ds: node node\d+: GPU \d \(\S+\): 1 of 2 values wrong", res.stderr), \
        res.stderr
    assert not list(out.iterdir())


def agent_on(node, marker):
    """The pid of this test's sgpu agent on SLURM node `node` (every slurmd runs on this machine)."""
    for pid in processes_with(marker):
        try:
            environ = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"SLURMD_NODENAME={node}".encode() in environ and b"\0agent\0" in cmdline:
            return pid
    return None


def attempt_0_up(proc):
    """sgpu's output until both ranks of attempt 0 said they are up."""
    out = []
    for line in proc.stdout:
        out.append(line)
        if sum("attempt 0" in seen for seen in out) == 2:
            return out
    raise AssertionError(f"sgpu ended before both ranks started: {''.join(out)}")


@pytest.mark.parametrize("new_allocation", [False, True], ids=["inside-an-allocation", "a-new-allocation"])
def test_a_lost_node_is_replaced_by_a_spare_node_of_the_allocation(slurm_cluster, cluster_env, sgpu, tmp_path,
                                                                   new_allocation):
    # --spares 1: the allocation holds a third node idle (inside one: salloc -k, so a lost node does not end
    # it; a new one: sgpu's own salloc asks for 3 nodes with --no-kill). Node 1's agent is killed in attempt 0;
    # attempt 1 runs on node 0 and the spare, in a step of its own, with the same WORLD_SIZE.
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    env = dict(cluster_env, SGPU_TEST_MARK=marker)
    job = ["--nnodes", 2, "--spares", 1, "--nproc", 1, "--max-restarts", 1, "--restart-backoff", "10ms", "--grace",
           "5s", "--no-python", "sh", "-c",
           'echo "up $RANK attempt $TORCHELASTIC_RESTART_COUNT on $SLURMD_NODENAME"; '
           '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 600; true']
    if new_allocation:
        argv = sgpu_cmd(sgpu, "launch", "--backend", "slurm", "--include", "node[1-3]", *job)
        proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    else:
        proc = slurm_cluster.popen("salloc", "-k", "-w", "node[1-3]", *sgpu_cmd(sgpu, "launch", *job), env=env)
    try:
        out = attempt_0_up(proc)
        lost = next(line.split()[-1] for line in out if "up 1 attempt 0" in line)
        pid = agent_on(lost, f"SGPU_TEST_MARK={marker}")
        assert pid, out
        os.kill(pid, signal.SIGKILL)
        rest, err = proc.communicate(timeout=120)
        stdout = "".join(out) + rest
        assert proc.returncode == 0, err
        assert f"node {lost} (node rank 1) was lost; spare node3 takes its place for attempt 1" in err, err
        assert "up 0 attempt 1 on node1" in stdout and "up 1 attempt 1 on node3" in stdout, stdout
        summary = newest_summary(env)
        assert [r["host"] for r in summary["ranks"]] == ["node1", "node3"]
        assert [e["host"] for e in summary["excluded"]] == [lost]
        assert no_rank_left(f"SGPU_TEST_MARK={marker}") == []
    finally:
        proc.kill()


def test_with_no_spare_sgpus_own_allocation_asks_slurm_for_a_node_in_the_lost_ones_place(slurm_cluster, cluster_env,
                                                                                          sgpu, tmp_path):
    # Submit mode, no --spares: node 1's agent is killed in attempt 0; sgpu asks SLURM for one more node, not
    # node2, as a job of its own, and attempt 1 runs there; both allocations are released at the end.
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    env = dict(cluster_env, SGPU_TEST_MARK=marker)
    argv = sgpu_cmd(sgpu, "launch", "--backend", "slurm", "--include", "node[1-2]", "--nnodes", 2, "--nproc", 1,
                    "--max-restarts", 1, "--restart-backoff", "10ms", "--grace", "5s", "--no-python", "sh", "-c",
                    'echo "up $RANK attempt $TORCHELASTIC_RESTART_COUNT on $SLURMD_NODENAME"; '
                    '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 600; true')
    proc = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out = attempt_0_up(proc)
        pid = agent_on("node2", f"SGPU_TEST_MARK={marker}")
        assert pid, out
        os.kill(pid, signal.SIGKILL)
        rest, err = proc.communicate(timeout=120)
        stdout = "".join(out) + rest
        assert proc.returncode == 0, err
        assert "node node2 (node rank 1) was lost; a node of a new SLURM allocation takes its place for attempt 1" \
            in err, err
        m = re.search(r"SLURM job (\d+) is running on (node\d+): it takes node2's place", err)
        assert m, err
        replacement_job, node = m.groups()
        assert node != "node2" and replacement_job != job_of(err)
        assert f"up 1 attempt 1 on {node}" in stdout, stdout
        summary = newest_summary(env)
        assert [r["host"] for r in summary["ranks"]] == ["node1", node]
        assert [a["nodes"] for a in summary["attempts"]] == [["node1", "node2"], ["node1", node]]
        assert job_state(slurm_cluster, replacement_job)[0] in ("COMPLETED", "GONE"), err  # released
        assert no_rank_left(f"SGPU_TEST_MARK={marker}") == []
    finally:
        proc.kill()
