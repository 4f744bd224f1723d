"""Every launch is an MLflow run: a real `mlflow server` (sqlite store,
artifact proxy, basic auth) on loopback, checked through MLflow's own Python
client; servers that are down or hang; the [mlflow] keys and flags."""
import contextlib
import http.server
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import python_program, sgpu_bin
from mlflow_server import MlflowServer, venv_python
from multinode import agent, free_port, make_secret_file, static_node

# One worker holds the session's MLflow server (a session fixture is made once a worker).
pytestmark = pytest.mark.xdist_group("mlflow")

RANK = python_program("mlflow_rank.py")
QUERY = python_program("mlflow_query.py")


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    with MlflowServer(tmp_path_factory.mktemp("mlflow"), auth=True) as server:
        print(f"mlflow server up in {server.startup_s:.1f}s")
        yield server


@pytest.fixture
def tracked(sgpu, mlflow_server):
    """sgpu whose environment names the server (MLFLOW_TRACKING_URI and the credentials)."""
    sgpu.env.update(mlflow_server.client_env())
    sgpu.env["SGPU_PYTHON"] = venv_python()  # ranks import mlflow
    for name in ("MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_EXPERIMENT_ID", "MLFLOW_TRACKING_TOKEN"):
        sgpu.env.pop(name, None)
    return sgpu


def query(env, *args):
    out = subprocess.run([venv_python(), QUERY, *args], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_launch_is_a_run_the_ranks_log_into(tracked, tmp_path):
    r = tracked.run("launch", "--nproc", 2, "-o", "json", "--mlflow-experiment", "sgpu-e2e",
                    "--set", "env.MY_API_TOKEN=hunter2", RANK, "long", "--password", "pw1")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    run_id = summary["mlflow"]["run_id"]
    assert f"sgpu: mlflow run {summary['mlflow']['url']}" in r.stderr
    assert summary["mlflow"]["url"].startswith(tracked.env["MLFLOW_TRACKING_URI"] + "/#/experiments/")
    run = query(tracked.env, "run", run_id)
    assert run["status"] == "FINISHED" and run["end_time"] >= run["start_time"]
    assert run["experiment_name"] == "sgpu-e2e"  # created, since it did not exist
    assert summary["mlflow"]["url"].endswith(f"/#/experiments/{run['experiment_id']}/runs/{run_id}")
    assert run["run_name"] == summary["run_id"]
    assert run["tags"]["sgpu.run_id"] == summary["run_id"]
    assert run["tags"]["mlflow.source.name"] == RANK
    assert run["tags"]["mlflow.user"]
    assert "mlflow.parentRunId" not in run["tags"]
    p = run["params"]
    assert (p["sgpu.world_size"], p["sgpu.nnodes"], p["sgpu.backend"], p["sgpu.timeout"]) == ("2", "1", "local", "3h")
    assert p["sgpu.args"] == "long --password '****'" and p["sgpu.env.MY_API_TOKEN"] == "****"
    assert run["metrics"]["loss"] == [[1, 0.25]]  # rank 0's mlflow.log_metric landed in sgpu's run
    assert run["metrics"]["sgpu.exit_code"] == [[0, 0]]
    assert [step for step, _ in run["metrics"]["sgpu.rank_duration_s"]] == [0, 1]
    assert {"summary.json", "spec.json", "events.jsonl", "ranks/0/stdout"} <= set(run["artifacts"])
    assert "ranks/0/stderr" not in run["artifacts"]  # rank 0 wrote nothing there: an empty log is not uploaded
    assert run["summary"]["run_id"] == summary["run_id"]
    # The run is awaited only once the outputs exist: spec.json still lists the variables every rank got.
    with open(os.path.join(summary["run_dir"], "spec.json")) as f:
        for spec in (json.load(f), summary["spec"]):
            assert spec["env"]["MLFLOW_RUN_ID"] == run_id and spec["env"]["MY_API_TOKEN"] == "****", spec["env"]
    for secret in ("hunter2", "pw1"):
        assert secret not in json.dumps(run), json.dumps(run)[max(0, json.dumps(run).find(secret) - 300):][:400]


def test_nested_run_failing_job_is_failed(tracked):
    parent = query(tracked.env, "parent")
    env = dict(tracked.env, MLFLOW_RUN_ID=parent["run_id"])
    r = tracked.run("launch", "--nproc", 2, "-o", "json", "--mlflow-run-name", "child", RANK, "fail", env=env)
    assert r.returncode == 3, r.stderr
    summary = json.loads(r.stdout)
    run = query(tracked.env, "run", summary["mlflow"]["run_id"])
    assert run["tags"]["mlflow.parentRunId"] == parent["run_id"]
    assert run["experiment_id"] == parent["experiment_id"]
    assert run["run_name"] == "child"
    assert run["status"] == "FAILED"
    assert run["metrics"]["sgpu.exit_code"] == [[0, 3]]
    assert "ranks/1/error.json" in run["artifacts"] and "ranks/1/stderr" in run["artifacts"]


def test_timeout_is_killed(tracked):
    r = tracked.run("launch", "--nproc", 2, "-o", "json", "--timeout", "2s", "--grace", "1s", RANK, "sleep")
    assert r.returncode == 124, r.stderr
    run = query(tracked.env, "run", json.loads(r.stdout)["mlflow"]["run_id"])
    assert run["status"] == "KILLED"
    assert run["metrics"]["sgpu.exit_code"] == [[0, 124]]


def test_bad_token_is_named_not_shown(tracked, tmp_path):
    env = dict(tracked.env, MLFLOW_TRACKING_TOKEN="tok-SECRET-123")
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        env.pop(name)
    r = tracked.run("launch", "--nproc", 1, "--no-python", "/bin/sh", "-c", "exit 5", env=env)
    assert r.returncode == 5
    assert "401" in r.stderr and "MLFLOW_TRACKING_TOKEN" in r.stderr and "untracked" in r.stderr
    assert "tok-SECRET-123" not in r.stderr + r.stdout
    for f in pathlib.Path(env["SGPU_HOME"]).rglob("*"):
        if f.is_file():
            assert b"tok-SECRET-123" not in f.read_bytes(), f


# --- servers that do not work: the job is never held up ---

def test_server_down_job_keeps_its_exit_code(sgpu):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    r = sgpu.run("launch", "--nproc", 2, "--mlflow", f"http://127.0.0.1:{port}", "-o", "json",
                 "--no-python", "/bin/sh", "-c", '[ "$RANK" = 0 ] && exit 6; exec sleep 30')
    elapsed = time.monotonic() - start
    assert r.returncode == 6, r.stderr
    assert f"sgpu: warning: mlflow: http://127.0.0.1:{port} " in r.stderr and "refused" in r.stderr
    assert json.loads(r.stdout)["mlflow"] is None
    assert elapsed < 3, elapsed


@contextlib.contextmanager
def hung_server():
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as hung:
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        yield hung, hung.getsockname()[1]


def test_server_that_never_answers_costs_only_mlflow_timeout(sgpu):
    with hung_server() as (hung, port):
        start = time.monotonic()
        # Rank 1 fails at once; rank 0 would sleep 60 s: fail-fast must still stop it.
        r = sgpu.run("launch", "--nproc", 2, "--mlflow", f"http://127.0.0.1:{port}", "--mlflow-timeout", "1s",
                     "--grace", "1s", "--no-python", "/bin/sh", "-c", '[ "$RANK" = 1 ] && exit 4; sleep 60')
        elapsed = time.monotonic() - start
    assert r.returncode == 4, r.stderr
    assert f"mlflow: http://127.0.0.1:{port} runs/create: no answer within 1s; the job runs untracked" in r.stderr
    assert elapsed < 4, elapsed


def test_timeout_and_ctrl_c_on_time_with_a_hung_server(sgpu):
    with hung_server() as (hung, port):
        start = time.monotonic()
        r = sgpu.run("launch", "--nproc", 1, "--mlflow", f"http://127.0.0.1:{port}", "--mlflow-timeout", "1s",
                     "--timeout", "1s", "--no-python", "/bin/sleep", "60")
        elapsed = time.monotonic() - start
    assert r.returncode == 124
    assert elapsed < 4, elapsed



def _waiting_on(hung):
    """Accepts sgpu's connection and reads its runs/create request: from then
    on sgpu waits for an answer that never comes."""
    hung.settimeout(30)
    conn, _ = hung.accept()
    conn.settimeout(30)
    assert b"runs/create" in conn.recv(65536)
    return conn


@pytest.mark.parametrize("sig,code,ignored", [(signal.SIGTERM, 143, False), (signal.SIGINT, 130, False),
                                              (signal.SIGINT, 130, True)])
def test_a_signal_while_the_mlflow_run_is_created_ends_the_launch_at_once(sgpu, sig, code, ignored):
    # Before the ranks start, sgpu waits for MLflow's answer (here: never).
    # A signal then must end the launch with its code and a summary, as it
    # does once the ranks run, also when SIGINT came inherited as ignored (a
    # background job of a script), which dropped the Ctrl-C before.
    with hung_server() as (hung, port):
        argv = [sgpu.bin, "launch", "--nproc", "1", "--mlflow", f"http://127.0.0.1:{port}", "--mlflow-timeout",
                "60s", "-o", "json", "--no-python", "/bin/true"]
        if ignored:
            argv = ["/bin/sh", "-c", 'trap "" INT; exec "$@"', "sh", *argv]
        p = subprocess.Popen(argv, env=sgpu.env, cwd=sgpu.cwd, text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        conn = _waiting_on(hung)
        start = time.monotonic()
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
        elapsed = time.monotonic() - start
        conn.close()
    assert p.returncode == code, err
    assert elapsed < 5, elapsed
    assert f"interrupted by {sig.name} while waiting for MLflow's run to be created" in err, err
    doc = json.loads(out)
    assert doc["exit_code"] == code and doc["status"] == "not_started", doc
    runs = json.loads(sgpu.run("runs", "-o", "json").stdout)
    assert [(r["state"], r["exit_code"]) for r in runs] == [("cancelled", code)], runs


def test_the_run_deadline_holds_while_the_mlflow_run_is_created(sgpu):
    # --timeout is the run's, from its start: a server slower than it ends
    # the launch at --timeout (124), not at --mlflow-timeout.
    with hung_server() as (hung, port):
        start = time.monotonic()
        r = sgpu.run("launch", "--nproc", 1, "--mlflow", f"http://127.0.0.1:{port}", "--mlflow-timeout", "30s",
                     "--timeout", "1s", "--no-python", "/bin/true")
        elapsed = time.monotonic() - start
    assert r.returncode == 124, r.stderr
    assert "timed out (--timeout 1s) while waiting for MLflow's run to be created" in r.stderr, r.stderr
    assert elapsed < 5, elapsed
    runs = json.loads(sgpu.run("runs", "-o", "json").stdout)
    assert [(r["state"], r["exit_code"]) for r in runs] == [("timed-out", 124)], runs


class _StubServer(http.server.ThreadingHTTPServer):
    """Answers MLflow's calls with HTTP/1.1 keep-alive. drop_second: the
    second request on every connection is dropped unanswered, as by a server
    whose idle connection closes just as the client sends on it. fail_once:
    the first PUT of that artifact is answered 500."""
    daemon_threads = True

    def __init__(self, drop_second=False, fail_once=None):
        self.calls = []
        self.dropped = 0
        self.failed = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def handle(self):
                if not drop_second:
                    return super().handle()
                self.handle_one_request()
                if self.rfile.readline():  # the next request: dropped unread
                    server.dropped += 1

            def answer(self):
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                name = self.path.rsplit("/", 1)[-1]
                server.calls.append((self.command, name, body))
                status, out = 200, b"{}"
                if self.path.endswith("runs/create"):
                    out = json.dumps({"run": {"info": {"run_id": "r1", "experiment_id": "0",
                                                       "artifact_uri": "mlflow-artifacts:/0/r1/artifacts"}}}).encode()
                elif self.command == "PUT" and name == fail_once and name not in server.failed:
                    server.failed.append(name)
                    status, out = 500, b'{"error_code": "INTERNAL_ERROR", "message": "disk full"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_POST = do_PUT = answer

        super().__init__(("127.0.0.1", 0), Handler)

    def launch(self, sgpu, *command):
        threading.Thread(target=self.serve_forever, daemon=True).start()
        try:
            return sgpu.run("launch", "--nproc", 2, "--mlflow", f"http://127.0.0.1:{self.server_address[1]}",
                            "--no-python", *command)
        finally:
            self.shutdown()


# A job that succeeds within a second: its params go with its metrics, in one
# log-batch, and summary.json stands for spec.json and events.jsonl.
SHORT_RUN = sorted([("POST", "create"), ("POST", "log-batch"), ("POST", "update"), ("PUT", "summary.json")])


def test_a_kept_connection_the_server_closed_is_tried_again_on_a_new_one(sgpu):
    with _StubServer(drop_second=True) as server:
        r = server.launch(sgpu, "/bin/sh", "-c", "sleep 0.2")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr
    assert server.dropped > 0  # the client did send on kept connections
    assert sorted((method, name) for method, name, _ in server.calls) == SHORT_RUN, server.calls
    [batch] = [json.loads(body) for _, name, body in server.calls if name == "log-batch"]
    assert batch["params"] and batch["metrics"]


def test_the_params_of_a_job_longer_than_a_second_go_out_while_it_runs(sgpu):
    with _StubServer() as server:
        r = server.launch(sgpu, "/bin/sh", "-c", "sleep 1.5")
    assert r.returncode == 0, r.stderr
    names = [name for _, name, _ in server.calls]
    assert names[0] == "create" and sorted(names[1:3]) == ["log-batch", "spec.json"], names  # before the job's end
    assert names.count("spec.json") == 1 and "events.jsonl" in names[3:], names
    batches = [json.loads(body) for _, name, body in server.calls if name == "log-batch"]
    assert [(bool(b["params"]), bool(b["metrics"])) for b in batches] == [(True, False), (False, True)]


def test_a_short_job_that_fails_uploads_every_artifact(sgpu):
    with _StubServer() as server:
        r = server.launch(sgpu, "/bin/sh", "-c", "echo broke >&2; exit 3")
    assert r.returncode == 3, r.stderr
    puts = {name for method, name, _ in server.calls if method == "PUT"}
    assert puts == {"events.jsonl", "spec.json", "stderr", "summary.json"}, puts  # stderr: the root cause's


def test_spec_json_that_failed_beside_the_job_goes_again_at_the_end(sgpu):
    with _StubServer(fail_once="spec.json") as server:
        r = server.launch(sgpu, "/bin/sh", "-c", "sleep 1.3")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr, r.stderr
    puts = [name for method, name, _ in server.calls if method == "PUT"]
    assert puts[0] == "spec.json" and puts.count("spec.json") == 2, puts  # first beside the job, then at the end
    assert server.failed == ["spec.json"]

# --- when tracking is on, and the [mlflow] keys ---

def test_tracking_off(sgpu, tmp_path):
    env = dict(sgpu.env, MLFLOW_TRACKING_URI="http://127.0.0.1:9")
    r = sgpu.run("launch", "--no-mlflow", "--nproc", 1, "--no-python", "/bin/sh", "-c", 'echo "[$MLFLOW_RUN_ID]"',
                 env=env)
    assert r.returncode == 0 and "[0] []" in r.stdout and "mlflow" not in r.stderr
    env["MLFLOW_TRACKING_URI"] = str(tmp_path / "mlruns")  # a file store: not a server
    r = sgpu.run("launch", "--nproc", 1, "--no-python", "/bin/true", env=env)
    assert r.returncode == 0
    assert "MLFLOW_TRACKING_URI=" in r.stderr and "not tracked" in r.stderr
    r = sgpu.run("launch", "--mlflow", "file:///tmp/x", "--nproc", 1, "--no-python", "/bin/true")
    assert r.returncode == 2 and "--mlflow" in r.stderr and "http://" in r.stderr


def test_mlflow_keys_in_a_spec(sgpu, tmp_path):
    spec = tmp_path / "job.toml"
    spec.write_text('[mlflow]\nuri = "http://127.0.0.1:5000"\nexperiment = "e"\nrun_name = "r"\n'
                    'enabled = false\ntimeout = "2s"\n')
    r = sgpu.run("launch", "--config", spec, "--dry-run", "-o", "json", "--nproc", 1, "--no-python", "/bin/true")
    assert r.returncode == 0, r.stderr
    settings = {s["key"]: s["value"] for s in json.loads(r.stdout)["settings"]}
    assert settings["mlflow.experiment"] == "e" and settings["mlflow.enabled"] is False
    spec.write_text('[mlflow]\nexperimnt = "e"\n')
    r = sgpu.run("launch", "--config", spec, "--dry-run", "--nproc", 1, "--no-python", "/bin/true")
    assert r.returncode == 2 and "did you mean 'mlflow.experiment'" in r.stderr


def test_two_static_nodes_are_one_run_that_every_rank_logs_into(tracked, tmp_path):
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    env1 = dict(tracked.env, SGPU_HOME=str(tmp_path / "node1-home"))
    n0 = static_node(tracked, 2, 0, endpoint, secret, "--nproc", 1, "-o", "json", RANK, "ok")
    n1 = static_node(tracked, 2, 1, endpoint, secret, "--nproc", 1, RANK, "ok", env=env1)
    o0, e0 = n0.communicate(timeout=120)
    _, e1 = n1.communicate(timeout=120)
    assert n0.returncode == 0 and n1.returncode == 0, (e0, e1)
    run_id = json.loads(o0)["mlflow"]["run_id"]
    # One run, made by the launcher (node 0); node 0's console shows every rank's line.
    assert set(re.findall(r"sgpu: mlflow run \S+/runs/(\w+)", e0)) == {run_id} and "mlflow run" not in e1, (e0, e1)
    assert set(re.findall(r"rank (\d) in run (\w+)", e0)) == {("0", run_id), ("1", run_id)}, e0
    run = query(tracked.env, "run", run_id)
    assert run["status"] == "FINISHED"
    assert (run["params"]["sgpu.nnodes"], run["params"]["sgpu.world_size"]) == ("2", "2")
    assert run["metrics"]["loss"] == [[1, 0.25]]
    assert run["metrics"]["sgpu.exit_code"] == [[0, 0]]


def test_a_multi_node_run_that_never_starts_is_failed_with_its_code(tracked, tmp_path):
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    n0 = static_node(tracked, 2, 0, endpoint, secret, "--nproc", 1, "--join-timeout", "1s", "-o", "json", RANK, "ok")
    o0, e0 = n0.communicate(timeout=60)
    assert n0.returncode == 1, e0
    summary = json.loads(o0)
    assert summary["status"] == "not_started"
    run_id = re.search(r"sgpu: mlflow run \S+/runs/(\w+)", e0).group(1)
    assert summary["mlflow"]["run_id"] == run_id and summary["mlflow"]["url"].endswith(f"/runs/{run_id}")
    with open(os.path.join(summary["run_dir"], "summary.json")) as f:
        assert json.load(f)["mlflow"] == summary["mlflow"]
    run = query(tracked.env, "run", run_id)
    assert run["status"] == "FAILED" and run["metrics"]["sgpu.exit_code"] == [[0, 1]]


def test_a_launch_that_fails_its_preflight_makes_no_run(tracked, tmp_path):
    from test_doctor import fake_libs
    dirs = fake_libs()
    env = dict(tracked.env, LD_LIBRARY_PATH=os.pathsep.join(str(dirs[n]) for n in ("cuda", "nccl", "nvml")),
               SGPU_FAKE_DRIVER_GPUS="2", SGPU_FAKE_NCCL_DIR=str(tmp_path), SGPU_FAKE_NCCL_BUSBW="0.001")
    args = ["launch", "--gpus", 2, "--preflight", "--set", "preflight.max_bytes=64K", "--set", "preflight.iters=2",
            "--set", "preflight.expect_busbw=0.0005", "--mlflow-experiment", f"preflight-{tmp_path.name}",
            "--no-python", "true"]
    healthy = tracked.run(*args, env=env)
    assert healthy.returncode == 0, healthy.stderr
    runs = query(tracked.env, "runs", f"preflight-{tmp_path.name}")
    assert len(runs) == 1 and f"/runs/{runs[0]}" in healthy.stderr
    failed = tracked.run(*args, env=dict(env, SGPU_FAKE_DRIVER_ECC="1:3"))
    assert failed.returncode == 1, failed.stderr
    assert "preflight: failed" in failed.stderr and "mlflow run" not in failed.stderr
    assert query(tracked.env, "runs", f"preflight-{tmp_path.name}") == runs
    # A check alone is not a run to track, healthy or not.
    only = tracked.run(*[a for a in args if a != "--preflight"][:-2], "--preflight-only", env=env)
    assert only.returncode == 0, only.stdout + only.stderr
    assert "healthy" in only.stdout and "mlflow run" not in only.stderr
    assert query(tracked.env, "runs", f"preflight-{tmp_path.name}") == runs


def test_a_multi_node_preflight_that_fails_ends_its_run_failed(tracked, tmp_path):
    # Across nodes the run exists before the nodes check their GPUs (the
    # launcher asks for it while they join): a bad GPU on node 1 ends it
    # FAILED with the preflight's code, and no rank starts.
    from test_doctor import fake_libs
    dirs = fake_libs()
    env = dict(tracked.env, LD_LIBRARY_PATH=os.pathsep.join(str(dirs[n]) for n in ("cuda", "nccl", "nvml")),
               SGPU_FAKE_DRIVER_GPUS="2", SGPU_FAKE_NCCL_DIR=str(tmp_path), SGPU_FAKE_NCCL_BUSBW="0.001")
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    n0 = static_node(tracked, 2, 0, endpoint, secret, "--gpus-per-node", 2, "--preflight", "-o", "json",
                     "--set", "preflight.max_bytes=64K", "--set", "preflight.iters=2", RANK, "ok", env=env)
    a1 = agent(tracked, endpoint, secret, "--node-name", "nodeb", "--node-rank", "1",
               env=dict(env, SGPU_FAKE_DRIVER_ECC="1:4"))
    o0, e0 = n0.communicate(timeout=120)
    a1.communicate(timeout=120)
    assert n0.returncode == 1, e0
    assert "preflight: failed" in e0 and "nodeb GPU 1 (00000000:19:00.0): 4 uncorrectable ECC errors" in e0, e0
    assert json.loads(o0)["status"] == "not_started"
    run_id = re.search(r"sgpu: mlflow run \S+/runs/(\w+)", e0).group(1)
    assert json.loads(o0)["mlflow"]["run_id"] == run_id
    run = query(tracked.env, "run", run_id)
    assert run["status"] == "FAILED" and run["metrics"]["sgpu.exit_code"] == [[0, 1]]
    assert "rank 0 in run" not in e0  # RANK prints it once it runs


def test_the_samples_are_mlflow_system_metrics_under_mlflows_own_gpu_names(tracked, tmp_path):
    nvml = pathlib.Path(os.environ.get("SGPU_FAKE_GPU_LIBS", pathlib.Path(sgpu_bin()).parents[2] / "tests" / "fake_gpu"))
    env = dict(tracked.env, LD_LIBRARY_PATH=str(nvml / "nvml"), SGPU_FAKE_DRIVER_GPUS="2", STEP_S="0.05", RUN_S="3")
    r = tracked.run("launch", "--gpus", 2, "-o", "json", "--sample-every", "500ms", python_program("steps.py"),
                    env=env)
    assert r.returncode == 0, r.stderr
    run = query(tracked.env, "run", json.loads(r.stdout)["mlflow"]["run_id"])
    m = run["metrics"]
    for gpu in (0, 1):
        util = m[f"system/gpu_{gpu}_utilization_percentage"]
        assert len(util) >= 3 and {v for _, v in util} == {30 + 10 * gpu}, util  # the fake driver's figures
        assert [step for step, _ in util] == list(range(len(util)))  # one step per sample, as MLflow's monitor
        assert {v for _, v in m[f"system/gpu_{gpu}_power_usage_watts"]} == {100 + gpu}
        assert {v for _, v in m[f"system/gpu_{gpu}_memory_usage_megabytes"]} == {(512 << 20) / 1e6}
        assert {v for _, v in m[f"system/gpu_{gpu}_memory_usage_percentage"]} == {0.6}
    for rank in (0, 1):
        assert all(v > 1 for _, v in m[f"system/rank_{rank}_memory_usage_megabytes"])
        rates = [v for _, v in m[f"system/rank_{rank}_step_rate"]]
        assert rates and all(5 < v < 25 for v in rates), rates


def test_the_gpus_the_health_gate_left_out_are_in_the_run(tracked):
    from test_health_gate import gpus
    env = gpus(tracked, 3, SGPU_FAKE_DRIVER_ECC="1:2")  # GPU 1 of 3 has uncorrectable ECC errors; --gpus 2
    r = tracked.run("launch", "--gpus", 2, "-o", "json", "--no-python", "true", env=env)
    assert r.returncode == 0, r.stderr
    run = query(tracked.env, "run", json.loads(r.stdout)["mlflow"]["run_id"])
    assert run["tags"]["sgpu.excluded"] == "GPU 1: 2 uncorrectable ECC errors since the driver loaded (attempt 0 on)"
    assert run["metrics"]["sgpu.excluded_gpus"] == [[0, 1]]
    assert run["summary"]["excluded"][0]["gpu"] == 1
