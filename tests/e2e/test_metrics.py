"""Seeing a running job: --sample-every's samples (metrics.jsonl), the
straggler warning, GPU samples through the fake NVML, Prometheus' /metrics
and `sgpu status`'s newest samples, with real processes."""
import json
import os
import pathlib
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import ROOT, python_program, sgpu_bin


def run_dir_of(home):
    runs = sorted(pathlib.Path(home, "runs").glob("2*"))
    assert runs, f"no run under {home}"
    return runs[-1]


def events_of(run_dir):
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def samples_of(run_dir):
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def parse_ts(ts):
    from datetime import datetime
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


@pytest.mark.parametrize("api", [False, True], ids=["heartbeat-file-lines", "sgpu.heartbeat-step"])
def test_the_slow_rank_is_named_a_straggler_within_three_samples(sgpu, api):
    env = dict(sgpu.env, SLOW_RANKS="2", STEP_S="0.05", RUN_S="5", USE_API="1" if api else "0",
               PYTHONPATH=str(ROOT / "python"))
    res = sgpu.run("launch", "--nproc", "4", "--sample-every", "1s", python_program("steps.py"), env=env)
    assert res.returncode == 0, res.stderr
    warnings = [line for line in res.stderr.splitlines() if "straggler" in line]
    assert len(warnings) == 1, res.stderr
    assert warnings[0].startswith("sgpu: warning: rank 2 is a straggler:"), warnings
    run_dir = run_dir_of(sgpu.env["SGPU_HOME"])
    events = events_of(run_dir)
    stragglers = [e for e in events if e["event"] == "straggler"]
    assert [e["rank"] for e in stragglers] == [2], stragglers
    # Half the others' rate, near enough.
    assert 0.3 < stragglers[0]["step_rate"] / stragglers[0]["median_step_rate"] < 0.7, stragglers
    started = min(parse_ts(e["ts"]) for e in events if e["event"] == "rank_started")
    assert parse_ts(stragglers[0]["ts"]) - started <= 3 * 1.0 + 0.5, (stragglers, started)
    # metrics.jsonl: a sample of every rank each second the job ran, with its CPU, memory and steps.
    samples = samples_of(run_dir)
    for rank in range(4):
        mine = [s for s in samples if s.get("rank") == rank]
        assert len(mine) >= 3, (rank, mine)
        assert all(s["rss_bytes"] > 1 << 20 and s["threads"] >= 1 and s["state"] in "RSD" for s in mine), mine
        assert mine[-1]["step"] > mine[0]["step"], mine
        assert any(s["cpu_percent"] is not None for s in mine), mine
        assert all(s["progress_age_s"] is not None and s["progress_age_s"] < 1.0 for s in mine), mine
    rates = {r: [s["step_rate"] for s in samples if s.get("rank") == r and s["step_rate"]] for r in range(4)}
    assert max(rates[2]) < min(rates[0]), rates
    # Each rank's lines say whether it is a straggler, from the sample that named it on.
    assert [[s for s in samples if s.get("rank") == r][-1]["straggler"] for r in range(4)] == [False, False, True, False]


def test_no_straggler_among_equal_ranks_and_none_when_turned_off(sgpu):
    env = dict(sgpu.env, STEP_S="0.05", RUN_S="3.5")
    res = sgpu.run("launch", "--nproc", "3", "--sample-every", "500ms", python_program("steps.py"), env=env)
    assert res.returncode == 0, res.stderr
    assert "is a straggler" not in res.stderr, res.stderr
    assert len(samples_of(run_dir_of(sgpu.env["SGPU_HOME"]))) >= 3 * 4
    env["SLOW_RANKS"] = "1"
    res = sgpu.run("launch", "--nproc", "3", "--sample-every", "500ms", "--straggler-factor", "off",
                   python_program("steps.py"), env=env)
    assert res.returncode == 0, res.stderr
    assert "is a straggler" not in res.stderr, res.stderr


def test_sampling_off_writes_no_metrics_and_bad_values_are_refused(sgpu):
    res = sgpu.run("launch", "--nproc", "2", "--sample-every", "off", "--no-python", "/bin/sleep", "1.5")
    assert res.returncode == 0, res.stderr
    assert not (run_dir_of(sgpu.env["SGPU_HOME"]) / "metrics.jsonl").exists()
    cases = {
        ("--sample-every", "10ms"): "shorter than 100ms",
        ("--sample-every", "often"): "--sample-every",
        ("--straggler-factor", "0.5"): "not a factor above 1",
        ("--straggler-factor", "fast"): "not a factor above 1",
        ("--metrics-port", "70000"): "--metrics-port",
        ("--metrics-addr", "localhost:9"): "not an IP address",
    }
    for (flag, value), message in cases.items():
        extra = ["--metrics-port", "29655"] if flag == "--metrics-addr" else []
        res = sgpu.run("launch", "--nproc", "1", flag, value, *extra, "--no-python", "/bin/true")
        assert res.returncode == 2, (flag, value, res.stderr)
        assert message in res.stderr and "sgpu: error:" in res.stderr, (flag, value, res.stderr)
    # A port another program listens on: named, nothing started.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        res = sgpu.run("launch", "--nproc", "1", "--metrics-port", port, "--no-python", "/bin/true")
    assert res.returncode == 2, res.stderr
    assert f"--metrics-port {port}: cannot listen on 127.0.0.1:{port}" in res.stderr, res.stderr


def test_gpu_samples_come_from_nvml(sgpu):
    nvml = pathlib.Path(os.environ.get("SGPU_FAKE_GPU_LIBS", pathlib.Path(sgpu_bin()).parents[2] / "tests" / "fake_gpu"))
    env = dict(sgpu.env, LD_LIBRARY_PATH=str(nvml / "nvml"), SGPU_FAKE_DRIVER_GPUS="2", STEP_S="0.05", RUN_S="2.5")
    res = sgpu.run("launch", "--gpus", "2", "--sample-every", "500ms", python_program("steps.py"), env=env)
    assert res.returncode == 0, res.stderr
    gpus = [s for s in samples_of(run_dir_of(sgpu.env["SGPU_HOME"])) if "gpu" in s]
    for index in (0, 1):
        mine = [s for s in gpus if s["gpu"] == index]
        assert len(mine) >= 3, gpus
        s = mine[-1]
        # The fake driver's figures (tests/fake_gpu/fake_nvml.cpp), as NVML gave them.
        assert s["utilization_percent"] == 30 + 10 * index, s
        assert s["power_watts"] == 100 + index and s["power_limit_watts"] == 700, s
        assert s["memory_total_bytes"] == 80 << 30 and s["memory_used_bytes"] == 512 << 20, s
        assert s["sm_clock_mhz"] == 1980 and s["temperature_c"] == 35 and s["throttle_reasons"] == 1, s
        assert s["ranks"] == [index] and s["uuid"].startswith("GPU-"), s


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_prometheus_scrapes_every_rank_while_the_job_runs(sgpu, tmp_path):
    from prometheus_client.parser import text_string_to_metric_families
    nvml = pathlib.Path(os.environ.get("SGPU_FAKE_GPU_LIBS", pathlib.Path(sgpu_bin()).parents[2] / "tests" / "fake_gpu"))
    port = free_port()
    env = dict(sgpu.env, LD_LIBRARY_PATH=str(nvml / "nvml"), SGPU_FAKE_DRIVER_GPUS="2", STEP_S="0.05", RUN_S="30",
               SLOW_RANKS="1")
    proc = sgpu.popen("launch", "--gpus", "2", "--sample-every", "300ms", "--metrics-port", port,
                      python_program("steps.py"), env=env)
    try:
        families = {}
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                    text = r.read().decode()
            except OSError:
                time.sleep(0.1)
                continue
            families = {f.name: f for f in text_string_to_metric_families(text)}
            stragglers = families.get("sgpu_rank_straggler")
            if stragglers and any(s.value == 1 for s in stragglers.samples):
                break
            time.sleep(0.3)
        run_id = run_dir_of(sgpu.env["SGPU_HOME"]).name
        cpu = families["sgpu_rank_cpu_percent"].samples
        assert sorted(s.labels["rank"] for s in cpu) == ["0", "1"], cpu
        assert all(s.labels["run"] == run_id and s.labels["node"] for s in cpu), cpu
        util = {s.labels["gpu"]: s.value for s in families["sgpu_gpu_utilization_percent"].samples}
        assert util == {"0": 30, "1": 40}, util
        flagged = {s.labels["rank"]: s.value for s in families["sgpu_rank_straggler"].samples}
        assert flagged == {"0": 0, "1": 1}, flagged
        assert {s.labels["rank"]: s.value for s in families["sgpu_rank_running"].samples} == {"0": 1, "1": 1}
        assert families["sgpu_seconds_since_progress"].samples[0].value < 2
        assert families["sgpu_run_info"].samples[0].labels["state"] == "running"
        # Anything but /metrics is not found; the port is loopback's only.
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)
        assert missing.value.code == 404
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    # Once the job is over the port is closed.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_status_shows_each_ranks_newest_sample_and_the_straggler(sgpu, cancel_detached_runs):
    env = dict(sgpu.env, SLOW_RANKS="0", STEP_S="0.05", RUN_S="60")
    res = sgpu.run("launch", "--detach", "--nproc", "3", "--sample-every", "300ms", python_program("steps.py"),
                   env=env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    deadline = time.monotonic() + 30
    doc = {}
    while time.monotonic() < deadline:
        doc = json.loads(sgpu.run("status", run_id, "-o", "json").stdout)
        if any(r["straggler"] for r in doc["ranks"]) and all(r["sample"] for r in doc["ranks"]):
            break
        time.sleep(0.2)
    assert doc["state"] == "running", doc
    assert [r["straggler"] for r in doc["ranks"]] == [True, False, False], doc["ranks"]
    for r in doc["ranks"]:
        assert r["sample"]["rank"] == r["rank"] and r["sample"]["pid"] == r["pid"], r
        assert r["sample"]["step"] >= 1, r
    assert doc["gpus"] == []  # CPU ranks
    text = sgpu.run("status", run_id).stdout
    header = next(line for line in text.splitlines() if line.strip().startswith("rank"))
    assert "cpu%" in header and "steps/s" in header, text
    row0 = next(line for line in text.splitlines() if line.strip().startswith("0 "))
    assert row0.endswith("straggler"), text
    assert sgpu.run("cancel", run_id).returncode == 0


def test_samples_of_two_static_nodes_reach_the_launcher_and_a_remote_straggler_is_named(sgpu, tmp_path):
    from multinode import agent, free_port, make_secret_file, static_node
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    env = dict(sgpu.env, SLOW_RANKS="3", STEP_S="0.05", RUN_S="4")
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--nproc", 2, "--sample-every", "500ms",
                     python_program("steps.py"), env=env)
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", "--node-rank", 1, env=env)
    o0, e0 = n0.communicate(timeout=120)
    o1, e1 = a1.communicate(timeout=120)
    assert n0.returncode == 0 and a1.returncode == 0, (e0, e1)
    run_dir = run_dir_of(sgpu.env["SGPU_HOME"])
    samples = samples_of(run_dir)
    host = socket.gethostname()
    by_rank = {r: [s for s in samples if s.get("rank") == r] for r in range(4)}
    assert {s["host"] for r in (0, 1) for s in by_rank[r]} == {host}, by_rank
    assert {s["host"] for r in (2, 3) for s in by_rank[r]} == {"nodeb"}, by_rank
    assert {s["node"] for r in (2, 3) for s in by_rank[r]} == {1}, by_rank
    assert all(len(by_rank[r]) >= 4 for r in range(4)), {r: len(v) for r, v in by_rank.items()}
    warnings = [line for line in e0.splitlines() if "is a straggler" in line]
    assert len(warnings) == 1 and warnings[0].startswith("sgpu: warning: rank 3 (nodeb) is a straggler"), e0
    assert "straggler" not in e1


class Tmux:
    """A terminal for `sgpu top`: its own tmux server, removed after the test."""

    def __init__(self, tmp_path, env):
        self.socket = str(tmp_path / "tmux.sock")
        self.env = env

    def __call__(self, *args):
        return subprocess.run(["tmux", "-S", self.socket, *args], env=self.env, capture_output=True, text=True,
                              timeout=30)

    def screen(self):
        return self("capture-pane", "-p", "-t", "top").stdout

    def wait_for(self, predicate, what, timeout=20):
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if predicate(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"{what}; the screen:\n{text}")

    def alive(self):
        return self("has-session", "-t", "top").returncode == 0


def rows_of(screen):
    """The rank rows of a top screen, as (rank, straggler, the rest of the line)."""
    out = []
    for line in screen.splitlines():
        parts = line.split()
        if parts and parts[0].rstrip("*").isdigit():
            out.append((int(parts[0].rstrip("*")), parts[0].endswith("*"), line))
    return out


def test_top_shows_every_rank_live_sorts_filters_and_quits_leaving_the_job_running(sgpu, tmp_path,
                                                                                    cancel_detached_runs):
    env = dict(sgpu.env, SLOW_RANKS="1", STEP_S="0.05", RUN_S="120", PRINT_EVERY="5")
    res = sgpu.run("launch", "--detach", "--nproc", "3", "--sample-every", "300ms", python_program("steps.py"),
                   env=env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    tmux = Tmux(tmp_path, dict(sgpu.env, TERM="xterm"))
    try:
        started = tmux("new-session", "-d", "-s", "top", "-x", "150", "-y", "20", f"{sgpu.bin} top {run_id}")
        assert started.returncode == 0, started.stderr
        screen = tmux.wait_for(lambda s: [r[:2] for r in rows_of(s)] == [(0, False), (1, True), (2, False)]
                               and all("step" in r[2] for r in rows_of(s)), "three rows, rank 1 marked")
        assert f"run {run_id} running, 3 ranks, 1 straggler" in screen, screen
        assert "steps/s" in screen and "last line" in screen, screen
        # s: the slowest first.
        tmux("send-keys", "-t", "top", "s")
        tmux.wait_for(lambda s: [r[0] for r in rows_of(s)][:1] == [1] and "sort: steps/s" in s, "rank 1 first")
        # / 2 Enter: only the ranks that match.
        tmux("send-keys", "-t", "top", "/", "2", "Enter")
        screen = tmux.wait_for(lambda s: [r[0] for r in rows_of(s)] == [2], "only rank 2")
        assert "(1 of 3 ranks shown" in screen, screen
        # Esc clears it; x shows the stragglers alone.
        tmux("send-keys", "-t", "top", "Escape")
        tmux.wait_for(lambda s: len(rows_of(s)) == 3, "every rank again")
        tmux("send-keys", "-t", "top", "x")
        tmux.wait_for(lambda s: [r[0] for r in rows_of(s)] == [1], "the straggler alone")
        # q: top ends, the job does not.
        tmux("send-keys", "-t", "top", "q")
        deadline = time.monotonic() + 10
        while tmux.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not tmux.alive()
        assert json.loads(sgpu.run("status", run_id, "-o", "json").stdout)["state"] == "running"
    finally:
        tmux("kill-server")
    # Without a terminal: one snapshot, and the command ends.
    res = sgpu.run("top", run_id)
    assert res.returncode == 0, res.stderr
    rows = rows_of(res.stdout)
    assert [r[:2] for r in rows] == [(0, False), (1, True), (2, False)], res.stdout
    assert "\x1b" not in res.stdout
    assert sgpu.run("cancel", run_id).returncode == 0
    res = sgpu.run("top")
    assert res.returncode != 0 and "no run is running" in res.stderr and "sgpu top RUN" in res.stderr, res.stderr


def test_the_dry_run_says_what_is_sampled(sgpu):
    res = sgpu.run("launch", "--dry-run", "--nproc", "2", "--sample-every", "5s", "--metrics-port", "29661",
                   "--no-python", "/bin/true")
    assert res.returncode == 0, res.stderr
    line = next(l for l in res.stdout.splitlines() if l.strip().startswith("samples"))
    assert "every 5s" in line and "1.5x below" in line and "/metrics on http://127.0.0.1:29661" in line, line
    doc = json.loads(sgpu.run("launch", "--dry-run", "-o", "json", "--nproc", "2", "--sample-every", "off",
                              "--no-python", "/bin/true").stdout)
    assert doc["sample_every_s"] is None and doc["metrics_listen"] is None, doc
    doc = json.loads(sgpu.run("launch", "--dry-run", "-o", "json", "--nproc", "2", "--no-python", "/bin/true").stdout)
    assert doc["sample_every_s"] == 10 and doc["straggler_factor"] == 1.5, doc


def test_an_idle_client_of_metrics_does_not_hold_the_launch_past_its_job(sgpu):
    port = free_port()
    proc = sgpu.popen("launch", "--nproc", "1", "--metrics-port", port, "--no-python", "/bin/sleep", "1")
    idle = None
    deadline = time.monotonic() + 10
    while idle is None and time.monotonic() < deadline:
        try:
            idle = socket.create_connection(("127.0.0.1", port), timeout=2)  # connects, sends nothing
        except OSError:
            time.sleep(0.05)
    assert idle is not None
    started = time.monotonic()
    try:
        proc.communicate(timeout=60)
        took = time.monotonic() - started
    finally:
        idle.close()
    assert proc.returncode == 0
    assert took < 4, f"the launch ended {took:.1f} s after an idle /metrics client connected"
