// The Ray node helper: the one process sgpu starts on each node of a --ray
// job (plan/ray.hpp). It is Python because Ray is: it runs with the job's
// interpreter, so `ray` is the one installed for it.
#include "sgpu/launcher/plan/ray.hpp"

namespace sgpu::launcher {

const char* ray_node_helper_source() {
  return R"PY(
import importlib.util, os, signal, socket, subprocess, sys, time

def say(message):
    print("sgpu: ray: " + message, file=sys.stderr, flush=True)

argv = sys.argv[1:]
cut = argv.index("--")
start, driver = argv[:cut], argv[cut + 1:]
head = "--head" in start
nodes = int(os.environ.pop("SGPU_RAY_NODES", "1"))
wait_s = float(os.environ.pop("SGPU_RAY_WAIT", "600"))  # --join-timeout; 0: no limit
wait_text = f"{wait_s:g}s"
me = int(os.environ.get("NODE_RANK", "0"))
log_path = os.environ.pop("SGPU_RAY_LOG", "")
link = os.environ.pop("SGPU_RAY_LINK", "")
metrics_path = os.environ.pop("SGPU_RAY_METRICS", "")
if importlib.util.find_spec("ray") is None:
    say(f"error: ray is not installed for {sys.executable} (node {me}); install it there "
        "(pip install ray) or give an interpreter that has it (--python, SGPU_PYTHON)")
    sys.exit(127)
host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
DONE, NAMESPACE = b"sgpu_done", b"sgpu"
signals = []
for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(number, lambda number, frame: signals.append(number))

if head:
    temp = next(a.split("=", 1)[1] for a in start if a.startswith("--temp-dir="))
    os.makedirs(temp, exist_ok=True)
    if link:
        try:
            os.symlink(temp, link)  # Ray's sockets need a short path: the run dir points to it
        except OSError:
            pass
else:
    # The address this node reaches the head from (a UDP connect sends nothing).
    family, _, _, _, head_addr = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0]
    probe = socket.socket(family, socket.SOCK_DGRAM)
    probe.connect(head_addr)
    start += [f"--address={address}", f"--node-ip-address={probe.getsockname()[0]}"]
    probe.close()

try:
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
except OSError:
    log = subprocess.DEVNULL
ray = None

def die_with_parent():
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: SIGTERM if this helper dies

def start_ray():
    global ray
    # Its own process group: a signal sgpu sends to the driver's group (Ctrl-C) leaves Ray up until the
    # driver has ended; then this helper stops it. If the helper is killed, ray start gets SIGTERM.
    ray = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", *start[1:]], stdin=subprocess.DEVNULL,
                           stdout=log, stderr=subprocess.STDOUT, process_group=0, preexec_fn=die_with_parent)

def stop_ray():
    if ray is None:
        return
    if ray.poll() is None:
        ray.terminate()  # SIGTERM: ray start --block stops the processes of its own session, no other
        try:
            ray.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(ray.pid, signal.SIGKILL)  # and whatever is left in its group
    except OSError:
        pass

def ray_ended():
    code = ray.poll()
    if code is None:
        return False
    say(f"the Ray node on node {me} stopped (ray start exited with {code}); see {log_path or 'its log'}")
    return True

def listening():
    try:
        socket.create_connection((host, port), timeout=0.5).close()  # the GCS listens: a client will not block
        return True
    except OSError:
        return False

gcs = None

def client():
    global gcs
    if gcs is None and listening():
        from ray._raylet import GcsClient
        gcs = GcsClient(address=address)
    return gcs

def node_states():
    """{node rank: (alive, address)} of the nodes the cluster knows."""
    states = {}
    for info in client().get_all_node_info(timeout=5).values():
        for name in info.resources_total:
            if name.startswith("sgpu_node_"):
                states[int(name[len("sgpu_node_"):])] = (info.state == 0, info.node_manager_address)
    return states

def past(deadline):
    return wait_s > 0 and time.monotonic() > deadline

def wait_for_nodes():
    deadline = time.monotonic() + wait_s
    alive = 0
    while not signals and not ray_ended():
        try:
            alive = sum(1 for up, _ in node_states().values() if up) if client() else 0
        except Exception:
            alive = 0
        if alive >= nodes:
            return True
        if past(deadline):
            say(f"only {alive} of {nodes} Ray nodes are alive after {wait_text} (--join-timeout); see {log_path}")
            return False
        time.sleep(0.1)
    return False

class Metrics:
    """--ray-metrics: every node's resources, one JSON line per node, once a second."""

    def __init__(self):
        self.out, self.state, self.next = None, None, 0.0

    def tick(self):
        if not metrics_path or time.monotonic() < self.next:
            return
        self.next = time.monotonic() + 1.0
        try:
            import json
            if self.state is None:
                from ray._private.state import GlobalState
                from ray._raylet import GcsClientOptions
                self.state = GlobalState()
                self.state._initialize_global_state(
                    GcsClientOptions.create(address, None, allow_cluster_id_nil=True, fetch_cluster_id_if_nil=True))
                self.out = open(metrics_path, "a")
            total = self.state.total_resources_per_node()
            available = self.state.available_resources_per_node()
            now = time.time()
            for node_id, resources in sorted(total.items()):
                rank = next((int(k[len("sgpu_node_"):]) for k in resources if k.startswith("sgpu_node_")), None)
                keep = lambda d: {k: v for k, v in d.items() if not k.startswith(("node:", "sgpu_node_"))}
                self.out.write(json.dumps({"time": round(now, 3), "node": rank, "node_id": node_id,
                                           "total": keep(resources), "available": keep(available.get(node_id, {}))})
                               + "\n")
            self.out.flush()
        except Exception as error:
            say(f"--ray-metrics: {error}")
            self.next = float("inf")

def run_head():
    start_ray()
    from ray._raylet import GcsClient  # imported while Ray starts (half a second)
    if not wait_for_nodes():
        return 128 + signals[0] if signals else 1
    known = node_states()
    environment = dict(os.environ, RAY_ADDRESS=address)
    job = subprocess.Popen(driver, env=environment)
    next_check = time.monotonic() + 0.5
    metrics = Metrics()
    while job.poll() is None:
        metrics.tick()
        time.sleep(0.1)
        if signals:
            continue  # the driver got the signal too (its process group): wait for it
        if ray_ended():
            job.terminate()
            job.wait()
            return 1
        if time.monotonic() >= next_check:
            next_check = time.monotonic() + 0.5
            try:
                for rank, (up, where) in node_states().items():
                    if not up and known.get(rank, (False, ""))[0]:
                        say(f"Ray node {rank} ({where}) died; stopping the driver")
                        job.terminate()
                        job.wait()
                        return 1
            except Exception:
                pass
    code = job.returncode if job.returncode >= 0 else 128 - job.returncode
    if code == 0 and nodes > 1 and not signals:
        # The other nodes wait for this mark, then stop their Ray nodes and exit 0.
        try:
            client().internal_kv_put(DONE, b"0", True, NAMESPACE)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and any(up for rank, (up, _) in node_states().items() if rank != me):
                time.sleep(0.1)
        except Exception:
            pass
    return code

def run_worker():
    from ray._raylet import GcsClient  # imported while the head starts
    # Ray nodes on one machine pick their ports as they start: the head first, so they do not collide.
    deadline = time.monotonic() + wait_s
    while not signals:
        try:
            if client() and node_states().get(0, (False, ""))[0]:
                break
        except Exception:
            pass
        if past(deadline):
            say(f"the Ray head at {address} was not up after {wait_text} (--join-timeout)")
            return 1
        time.sleep(0.1)
    if signals:
        return 128 + signals[0]
    start_ray()
    while not signals:
        if ray_ended():
            return 1
        try:
            if client() and client().internal_kv_get(DONE, NAMESPACE) is not None:
                return 0
        except Exception:
            pass
        time.sleep(0.2)
    return 128 + signals[0]

try:
    code = run_head() if head else run_worker()
finally:
    stop_ray()
sys.exit(code)
)PY";
}

}  // namespace sgpu::launcher
