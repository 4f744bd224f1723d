"""sgpu launch --ray with a real Ray (PyPI, installed by scripts/venv): one Ray
node per sgpu node, the entrypoint run once on node 0 as the driver, and no
Ray process left after any end."""
import json
import os
import signal
import subprocess
import time

import pytest

import ssh_hosts
from conftest import newest_summary
from mlflow_server import venv_python
from multinode import free_port, make_secret_file, static_node, wait_for
from slurm_cluster import slurm_cluster  # noqa: F401 (the session's cluster, a fixture)

# One worker holds the session's SLURM cluster (under pytest-xdist, a session
# fixture is made once a worker), and these tests look for Ray processes machine-wide.
pytestmark = pytest.mark.xdist_group("slurm")

RAY_NAMES = ("raylet", "gcs_server")


def ray_processes():
    """(pid, pgid, what) of every Ray process on the machine: by name, and ray:: workers."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            pgid = os.getpgid(int(entry))
        except (OSError, ProcessLookupError):
            continue
        if comm in RAY_NAMES or cmdline.startswith("ray::") or "ray.scripts.scripts" in cmdline:
            found.append((int(entry), pgid, comm if comm in RAY_NAMES else cmdline[:60]))
    return found


def group_alive(pgid):
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.fixture(autouse=True)
def no_ray_left():
    assert not ray_processes(), "Ray processes before the test"
    groups = set()
    yield groups
    # sgpu has exited when a test gets here: what it started is gone, by name and by process group.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (ray_processes() or any(group_alive(g) for g in groups)):
        time.sleep(0.05)
    assert not ray_processes()
    assert not [g for g in groups if group_alive(g)]


@pytest.fixture
def ray_env(sgpu):
    env = dict(sgpu.env, SGPU_PYTHON=venv_python())
    return env


def program(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


DRIVER = """
import os, sys, ray
ray.init()
slots = ray.cluster_resources().get("CPU")
print("CPU", slots, flush=True)
@ray.remote
def square(x):
    return x * x
assert ray.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]
print("tasks ok", flush=True)
sys.exit(int(os.environ.get("DRIVER_CODE", "0")))
"""

# Runs until stopped; says "ready" once the cluster is up and the driver connected.
SLEEPER = """
import os, time, ray
ray.init()
print("ready", len([n for n in ray.nodes() if n["Alive"]]), os.environ["RAY_ADDRESS"], flush=True)
time.sleep(600)
"""


def test_local_driver_sees_the_slots_and_its_exit_code_is_the_jobs(sgpu, ray_env, tmp_path):
    driver = program(tmp_path, "driver.py", DRIVER)
    r = sgpu.run("launch", "--ray", "--ray-metrics", "--nproc", 2, driver, env=dict(ray_env, DRIVER_CODE="3"),
                 timeout=240)
    assert "CPU 2.0" in r.stdout and "tasks ok" in r.stdout, r.stdout + r.stderr
    assert r.stdout.count("CPU 2.0") == 1  # the driver ran once
    assert r.returncode == 3, r.stderr
    # --ray-metrics: summary.json points to one JSON line per node and second.
    summary = newest_summary(sgpu.env["SGPU_HOME"])
    path = summary["ray_metrics"]
    assert path == os.path.join(summary["run_dir"], "ray", "metrics.jsonl")
    lines = [json.loads(line) for line in open(path)]
    # Ray leaves out a resource with nothing available.
    assert lines and all(m["node"] == 0 and m["total"]["CPU"] == 2.0 and m["available"].get("CPU", 0) <= 2 for m in lines)
    # Ray's session stays with the run: this run directory's path is too long for
    # Ray's unix sockets, so <run dir>/ray links to /tmp/sgpu-ray-<run id>.
    ray_dir = os.path.join(summary["run_dir"], "ray")
    assert os.readlink(ray_dir) == f"/tmp/sgpu-ray-{summary['run_id']}"
    assert any(name.startswith("session_") for name in os.listdir(ray_dir))
    assert os.path.getsize(os.path.join(summary["run_dir"], "ranks", "0", "ray-start.log")) > 0


# A GCS client, as any process that wants the cluster would make one.
PROBE = """
import sys
from ray._raylet import GcsClient
try:
    print(len(GcsClient(address=sys.argv[1]).get_all_node_info(timeout=10)), "nodes")
except Exception as e:
    print(e)
"""


# Prints how many nodes are alive, and whether a task pinned to node 1 ran there.
PINNED = """
import ray
ray.init()
alive = [n for n in ray.nodes() if n["Alive"]]
print("alive", len(alive), flush=True)
node1 = [n["NodeID"] for n in alive if "sgpu_node_1" in n["Resources"]]
@ray.remote(resources={"sgpu_node_1": 0.01})
def where():
    return ray.get_runtime_context().get_node_id()
print("on node 1", ray.get(where.remote()) == node1[0], flush=True)
"""


def test_two_static_nodes_form_one_cluster_and_a_pinned_task_runs_on_node_1(sgpu, ray_env, tmp_path):
    driver = program(tmp_path, "driver.py", PINNED)
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    n1 = static_node(sgpu, 2, 1, endpoint, secret, "--ray", "--nproc", 1, driver, env=ray_env)
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--ray", "--nproc", 1, driver, env=ray_env)
    o0, e0 = n0.communicate(timeout=240)
    o1, e1 = n1.communicate(timeout=60)
    assert n0.returncode == 0 and n1.returncode == 0, e0 + e1
    assert "alive 2" in o0 and "on node 1 True" in o0, o0 + e0
    assert "alive" not in o1  # the other nodes run no user code


def ray_groups_of(pid):
    """Process groups of the Ray processes descended from `pid`."""
    def ancestors(p):
        seen = []
        while p > 1:
            try:
                with open(f"/proc/{p}/stat") as f:
                    p = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                break
            seen.append(p)
        return seen
    return {(p, g, what) for p, g, what in ray_processes() if pid in ancestors(p)}


def test_a_ray_worker_node_killed_mid_run_stops_the_job_and_is_named(sgpu, ray_env, tmp_path, no_ray_left):
    driver = program(tmp_path, "driver.py", SLEEPER)
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    n1 = static_node(sgpu, 2, 1, endpoint, secret, "--ray", "--nproc", 1, driver, env=ray_env)
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--ray", "--nproc", 1, driver, env=ray_env)
    line = n0.stdout.readline()
    assert "ready 2" in line, line + n0.stderr.read() if n0.poll() is not None else line
    node1 = ray_groups_of(n1.pid)
    no_ray_left.update(g for _, g, _ in node1 | ray_groups_of(n0.pid))
    raylet = [p for p, _, what in node1 if what == "raylet"]
    assert len(raylet) == 1, node1
    os.kill(raylet[0], signal.SIGKILL)
    o0, e0 = n0.communicate(timeout=90)
    o1, e1 = n1.communicate(timeout=60)
    assert n0.returncode not in (0, None), e0
    assert "rank 1" in e0 and "the Ray node on node 1 stopped" in e0 + e1, e0 + e1


@pytest.mark.parametrize("how", ["sigint", "timeout"])
def test_ctrl_c_and_the_timeout_stop_the_driver_and_ray(sgpu, ray_env, tmp_path, no_ray_left, how):
    driver = program(tmp_path, "driver.py", SLEEPER)
    extra = ["--timeout", "10s"] if how == "timeout" else []
    p = sgpu.popen("launch", "--ray", "--nproc", 1, *extra, driver, env=ray_env)
    line = p.stdout.readline()
    assert "ready 1" in line, line
    no_ray_left.update(g for _, g, _ in ray_groups_of(p.pid))
    assert no_ray_left
    if how == "sigint":
        # The cluster has Ray's token authentication on: a client with another token is refused.
        probe = subprocess.run([venv_python(), "-c", PROBE, line.split()[-1]], capture_output=True, text=True,
                               timeout=60, env=dict(ray_env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="x" * 32))
        assert "InvalidAuthToken" in probe.stdout, probe.stdout + probe.stderr
        p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=90)
    assert p.returncode == (130 if how == "sigint" else 124), err


def test_ray_missing_is_exit_127_naming_ray(sgpu, tmp_path):
    if subprocess.run(["/usr/bin/python3", "-c", "import ray"], capture_output=True).returncode == 0:
        pytest.skip("Debian's python3 has ray here: no interpreter without it")
    driver = program(tmp_path, "driver.py", DRIVER)
    r = sgpu.run("launch", "--ray", "--nproc", 1, "--python", "/usr/bin/python3", driver, timeout=60)
    assert r.returncode == 127, r.stderr
    assert "ray is not installed for /usr/bin/python3" in r.stderr


def test_dry_run_shows_the_ray_plan(sgpu, ray_env, tmp_path):
    driver = program(tmp_path, "driver.py", DRIVER)
    r = sgpu.run("launch", "--ray", "--nproc", 2, "--dry-run", driver, env=ray_env)
    assert r.returncode == 0, r.stderr
    assert "ray start --head" in r.stdout and "--num-cpus=2" in r.stdout
    assert "--include-dashboard=false" in r.stdout
    assert "RAY_USAGE_STATS_ENABLED=0" in r.stdout


def test_ssh_backend_over_two_test_hosts(sgpu, ray_env, tmp_path):
    """Each host (its own network namespace) is one Ray node; the task pinned to node 1 runs at its address."""
    if ssh_hosts.usable() is not None:
        pytest.skip(str(ssh_hosts.usable()))
    from test_ssh_backend import WITH_SGPU, host_list, launch
    driver = program(tmp_path, "driver.py", """
import ray
ray.init()
alive = [n for n in ray.nodes() if n["Alive"]]
print("alive", len(alive), sorted(n["NodeManagerAddress"] for n in alive), flush=True)
@ray.remote(resources={"sgpu_node_1": 0.01})
def where():
    return ray.util.get_node_ip_address()
print("node 1 at", ray.get(where.remote()), flush=True)
""")
    with ssh_hosts.SshHosts(2, host_env={0: WITH_SGPU, 1: WITH_SGPU}) as hosts:
        r = launch(hosts, sgpu, "--hosts", host_list(hosts), "--ray", "--nproc", 1, "--python", venv_python(), driver,
                   env=ray_env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "alive 2" in r.stdout, r.stdout
        assert f"node 1 at {hosts.hosts[1].addr}" in r.stdout, r.stdout


def test_a_slurm_allocation_of_two_nodes_is_one_cluster(slurm_cluster, sgpu, ray_env, tmp_path):
    """Inside salloc -N2 the SLURM backend starts one agent per node (srun); each is one Ray node."""
    driver = program(tmp_path, "driver.py", PINNED)
    env = dict(ray_env, SLURM_CONF=slurm_cluster.env["SLURM_CONF"])
    for var in [v for v in env if v.startswith("SLURM_") and v != "SLURM_CONF"]:
        del env[var]
    r = slurm_cluster.run("salloc", "-N2", sgpu.bin, "launch", "--ray", "--nproc", 1, str(driver), env=env,
                          cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "alive 2" in r.stdout and "on node 1 True" in r.stdout, r.stdout + r.stderr
