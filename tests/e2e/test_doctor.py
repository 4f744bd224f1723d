"""sgpu doctor: the real binary, its real worker processes and the real dlopen
path, against the fake libcuda/libnccl/libnvidia-ml the build makes under
build/tests/fake_gpu/ (README "Test hooks"), with faults injected through
their environment variables."""
import ctypes
import json
import os
import pathlib
import re
import socket
import time

import pytest

from conftest import newest_summary, sgpu_bin
from multinode import agent, free_port, make_secret_file, static_node

# 8 B .. 64 KiB by 2: 14 sizes, 2 timed calls each. The fake's barriers cost a
# few ms on a loaded machine, so its simulated link (1 MB/s, 65 ms for 64 KiB)
# is slow enough to be what the largest size measures.
SIZES = ["--max-bytes", "64K", "--iters", "2", "--warmup", "0"]


def fake_libs():
    root = pathlib.Path(os.environ.get("SGPU_FAKE_GPU_LIBS", pathlib.Path(sgpu_bin()).parents[2] / "tests" / "fake_gpu"))
    dirs = {name: root / name for name in ("cuda", "nccl", "nvml")}
    for name, lib in (("cuda", "libcuda.so.1"), ("nccl", "libnccl.so.2"), ("nvml", "libnvidia-ml.so.1")):
        if not (dirs[name] / lib).exists():
            pytest.fail(f"{dirs[name] / lib} is missing: build the tests (scripts/build) or set SGPU_FAKE_GPU_LIBS")
    return dirs


@pytest.fixture
def fake(sgpu, tmp_path):
    """sgpu with a fake driver of two H100s; tests add faults to sgpu.env."""
    dirs = fake_libs()
    env = sgpu.env
    env["LD_LIBRARY_PATH"] = os.pathsep.join(str(dirs[n]) for n in ("cuda", "nccl", "nvml"))
    env["SGPU_FAKE_DRIVER_GPUS"] = "2"
    env["SGPU_FAKE_NCCL_DIR"] = str(tmp_path)
    env["SGPU_FAKE_NCCL_BUSBW"] = "0.001"  # GB/s: each all-reduce lasts at least that long
    for name in [k for k in env if k.startswith("SGPU_FAKE_NCCL_") and k not in ("SGPU_FAKE_NCCL_DIR", "SGPU_FAKE_NCCL_BUSBW")]:
        del env[name]
    return sgpu


def workers_left(marker):
    """Processes whose environment holds `marker` (this test's own directory)."""
    left = []
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if marker.encode() in (proc / "environ").read_bytes():
                left.append(int(proc.name))
        except OSError:
            pass
    return left


def test_healthy_gpus_pass_with_a_table_per_gpu_link_and_size(fake):
    res = fake.run("doctor", *SIZES, "--expect-busbw", "0.0005")
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert out.startswith("sgpu doctor: 2 GPUs, NCCL 2.28.9, ")
    assert "0    H100     00000000:18:00.0" in out and "1    H100     00000000:19:00.0" in out
    assert "0-1      NV" in out
    assert "64 KiB" in out and "8 B" in out
    assert "expected busbw: 0.0005 GB/s (--expect-busbw)" in out
    assert out.rstrip().endswith("healthy")


def test_json_is_one_document_with_nccl_tests_bandwidths(fake):
    res = fake.run("doctor", *SIZES, "--expect-busbw", "0.0005", "-o", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "healthy" and doc["exit_code"] == 0 and doc["failures"] == []
    assert [g["pci_bus_id"] for g in doc["gpus"]] == ["00000000:18:00.0", "00000000:19:00.0"]
    assert all(g["verdict"]["verdict"] == "pass" and g["ecc_volatile_uncorrected"] == 0 for g in doc["gpus"])
    assert [(l["a"], l["b"], l["path"]) for l in doc["links"]] == [(0, 1, "NV")]
    sizes = doc["allreduce"]["sizes"]
    assert [s["bytes"] for s in sizes] == [8 << k for k in range(14)]
    for s in sizes:
        assert len(s["rank_time_us"]) == 2
        assert s["time_us"] == pytest.approx(sum(s["rank_time_us"]) / 2)
        assert s["algbw_gbps"] == pytest.approx(s["bytes"] / 1e3 / s["time_us"])
        assert s["busbw_gbps"] == pytest.approx(s["algbw_gbps"] * 2 * (2 - 1) / 2)
    # The fake's simulated bus bandwidth (0.001 GB/s) is what the largest size measures.
    assert 0.0004 < sizes[-1]["busbw_gbps"] <= 0.00105


def test_one_gpu_checks_values_without_a_bandwidth_verdict(fake):
    res = fake.run("doctor", "--gpus", "1", *SIZES, "-o", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert len(doc["gpus"]) == 1 and doc["links"] == []
    assert all(s["busbw_gbps"] == 0 for s in doc["allreduce"]["sizes"])
    assert "one GPU" in doc["allreduce"]["verdict"]["reasons"][0]


def test_a_wrong_sum_fails_naming_the_gpu(fake):
    fake.env["SGPU_FAKE_NCCL_WRONG"] = "1"
    res = fake.run("doctor", *SIZES)
    assert res.returncode == 1, res.stdout + res.stderr
    assert ("GPU 1 (00000000:19:00.0): 1 of 2 values wrong after the 8 B all-reduce (element 1: 6 instead of 5)"
            in res.stdout)
    assert "FAIL" in res.stdout


def test_ecc_errors_fail_naming_the_gpu(fake):
    fake.env["SGPU_FAKE_DRIVER_ECC"] = "1:3"
    res = fake.run("doctor", *SIZES, "-o", "json", "--expect-busbw", "0.0005")
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    assert doc["status"] == "failed"
    assert doc["failures"] == ["GPU 1 (00000000:19:00.0): 3 uncorrectable ECC errors since the driver loaded"]
    assert doc["gpus"][0]["verdict"]["verdict"] == "pass"
    assert doc["gpus"][1]["verdict"]["verdict"] == "fail"


def test_a_stray_process_and_a_missing_p2p_link_warn(fake):
    fake.env["SGPU_FAKE_DRIVER_PIDS"] = "0:4242"
    fake.env["SGPU_FAKE_DRIVER_NO_P2P"] = "0-1"
    res = fake.run("doctor", *SIZES, "--expect-busbw", "0.0005")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "warn: 1 process(es) already on it (pid 4242)" in res.stdout
    assert "no peer-to-peer between GPU 0 and GPU 1" in res.stdout
    assert res.stdout.rstrip().endswith("healthy, with warnings")


def test_a_slow_link_fails_against_the_gpu_type_and_warns_against_an_override(fake):
    res = fake.run("doctor", *SIZES, "-o", "json")
    assert res.returncode == 1
    doc = json.loads(res.stdout)
    expected = doc["allreduce"]["expected"]
    assert expected["busbw_gbps"] == 360 and expected["source"].startswith("NVIDIA H100 SXM datasheet")
    assert doc["failures"][0].startswith("all-reduce across 2 GPUs at 64 KiB: busbw ")
    assert "of the 360 GB/s expected" in doc["failures"][0]
    res = fake.run("doctor", *SIZES, "--expect-busbw", "0.0016")  # measured ~0.001 GB/s: ~60 %
    assert res.returncode == 0, res.stdout
    assert "all-reduce: warn: busbw" in res.stdout and "GB/s expected (--expect-busbw)" in res.stdout


def test_a_hung_all_reduce_ends_at_the_time_limit_and_leaves_no_worker(fake, tmp_path):
    fake.env["SGPU_FAKE_NCCL_HANG"] = "1"
    started = time.monotonic()
    res = fake.run("doctor", *SIZES, "--timeout", "1s", timeout=30)
    took = time.monotonic() - started
    assert res.returncode == 1, res.stdout + res.stderr
    assert ("the all-reduce did not finish within 1s at 8 B: GPU 0 (00000000:18:00.0), GPU 1 (00000000:19:00.0) "
            "did not report (a hung link or GPU)") in res.stdout
    assert took < 5
    assert workers_left(str(tmp_path)) == []


def test_a_communicator_that_never_forms_ends_at_the_time_limit(fake, tmp_path):
    fake.env["SGPU_FAKE_NCCL_HANG_INIT"] = "1"
    res = fake.run("doctor", *SIZES, "--timeout", "1s", timeout=30)
    assert res.returncode == 1, res.stdout + res.stderr
    assert ("the NCCL communicator setup did not finish within 1s at 8 B: GPU 0 (00000000:18:00.0), "
            "GPU 1 (00000000:19:00.0) did not report\n") in res.stdout
    assert workers_left(str(tmp_path)) == []


def test_report_dir_keeps_the_document_and_the_workers_stderr(fake, tmp_path):
    fake.env["NCCL_DEBUG"] = "INFO"
    res = fake.run("doctor", *SIZES, "--expect-busbw", "0.0005", "-o", "json", "--report-dir", tmp_path / "report")
    assert res.returncode == 0, res.stderr
    kept = json.loads((tmp_path / "report" / "preflight.json").read_text())
    assert kept == json.loads(res.stdout)
    assert sorted(p.name for p in (tmp_path / "report" / "preflight").iterdir()) == ["worker-0.stderr",
                                                                                   "worker-1.stderr"]


def test_a_crashed_worker_fails_naming_its_gpu(fake):
    fake.env["SGPU_FAKE_NCCL_CRASH"] = "0"
    res = fake.run("doctor", *SIZES, timeout=30)
    assert res.returncode == 1
    assert "GPU 0 (00000000:18:00.0): the all-reduce worker was killed by signal 6" in res.stdout


def test_no_driver_no_gpu_no_nccl_exit_3_with_one_line(fake, tmp_path):
    env = dict(fake.env)
    env["LD_LIBRARY_PATH"] = str(tmp_path)  # no driver libraries at all
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
        driver = True
    except OSError:
        driver = False
    if not driver:
        res = fake.run("doctor", env=env)
        assert res.returncode == 3, res.stdout + res.stderr
        assert res.stdout.startswith("sgpu doctor: not checked: no NVIDIA driver found (")
        assert res.stdout.count("\n") == 1
    fake.env["SGPU_FAKE_DRIVER_GPUS"] = "0"
    res = fake.run("doctor", "-o", "json")
    assert res.returncode == 3
    assert json.loads(res.stdout) == {"status": "unavailable", "exit_code": 3, "reason": "no GPU: the driver lists none"}
    fake.env["SGPU_FAKE_DRIVER_GPUS"] = "2"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "libnccl.so.2").write_bytes(b"")  # found first, and not a library
    fake.env["LD_LIBRARY_PATH"] = f"{broken}{os.pathsep}{fake.env['LD_LIBRARY_PATH']}"
    res = fake.run("doctor")
    assert res.returncode == 3
    assert res.stdout.startswith("sgpu doctor: not checked: no NCCL: ") and "libnccl.so.2" in res.stdout


def test_usage_errors_exit_2(fake):
    for args, says in ((["--max-bytes", "1T"], "--max-bytes 1T: not a size"),
                       (["--min-bytes", "1M", "--max-bytes", "1K"], "--min-bytes 1048576 is above --max-bytes 1024"),
                       (["--gpus", "3"], "--gpus 3: this node has only 2 visible H100 GPUs"),
                       (["--timeout", "none"], "doctor needs a limit")):
        res = fake.run("doctor", *args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert says in res.stderr


def test_devices_reads_the_fake_nvml_through_the_real_dlopen_path(fake):
    res = fake.run("devices", "-o", "json")
    assert res.returncode == 0, res.stderr
    assert [(g["type"], g["pci_bus_id"]) for g in json.loads(res.stdout)] == [("H100", "00000000:18:00.0"),
                                                                              ("H100", "00000000:19:00.0")]


# sgpu launch --preflight: the same checks on exactly the job's GPUs, before any rank starts.
PREFLIGHT = ["--preflight", "--set", "preflight.max_bytes=64K", "--set", "preflight.iters=2"]
RANK = ["--no-python", "sh", "-c", 'echo "ran $RANK on $CUDA_VISIBLE_DEVICES"; touch "ran-$RANK"']


def run_dir_of(sgpu):
    runs = list((pathlib.Path(sgpu.env["SGPU_HOME"]) / "runs").iterdir())
    assert len(runs) == 1, runs
    return runs[0]


def test_launch_preflight_checks_the_jobs_gpus_then_starts_the_ranks(fake):
    res = fake.run("launch", "--gpus", "2", *PREFLIGHT, "--set", "preflight.expect_busbw=0.0005", *RANK)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"^sgpu: preflight: 2 GPUs healthy in \d+\.\ds \(busbw [\d.]+ GB/s at 64 KiB\)$", res.stderr,
                     re.M), res.stderr
    assert sorted(res.stdout.splitlines()) == ["[0] ran 0 on 0,1", "[1] ran 1 on 0,1"]
    report = json.loads((run_dir_of(fake) / "preflight.json").read_text())
    assert report["status"] == "healthy"
    assert [g["pci_bus_id"] for g in report["gpus"]] == ["00000000:18:00.0", "00000000:19:00.0"]


def test_launch_preflight_that_fails_names_the_gpu_and_starts_no_rank(fake):
    fake.env["SGPU_FAKE_DRIVER_ECC"] = "1:3"
    res = fake.run("launch", "--gpus", "2", *PREFLIGHT, "--set", "preflight.expect_busbw=0.0005", *RANK)
    assert res.returncode == 1, res.stdout + res.stderr
    run_dir = run_dir_of(fake)
    assert re.search(r"^sgpu: error: preflight: failed in \d+\.\ds: GPU 1 \(00000000:19:00\.0\): 3 uncorrectable "
                     r"ECC errors since the driver loaded; no rank was started \(report: "
                     + re.escape(str(run_dir / "preflight.json")) + r"\)$", res.stderr, re.M), res.stderr
    assert res.stdout == "" and not list(fake.cwd.glob("ran-*"))
    summary = newest_summary(fake.env)
    assert summary["status"] == "not_started" and summary["exit_code"] == 1
    assert json.loads((run_dir / "preflight.json").read_text())["status"] == "failed"


def test_launch_preflight_that_hangs_costs_its_limit_and_leaves_no_worker(fake, tmp_path):
    fake.env["SGPU_FAKE_NCCL_HANG"] = "1"
    started = time.monotonic()
    res = fake.run("launch", "--gpus", "2", *PREFLIGHT, "--set", "preflight.timeout=1s", *RANK, timeout=30)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "the all-reduce did not finish within 1s at 8 B" in res.stderr
    assert time.monotonic() - started < 6
    assert not list(fake.cwd.glob("ran-*"))
    assert workers_left(str(tmp_path)) == []


def test_launch_preflight_without_nccl_exits_3_and_starts_no_rank(fake, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "libnccl.so.2").write_bytes(b"")  # found first, and not a library
    fake.env["LD_LIBRARY_PATH"] = f"{broken}{os.pathsep}{fake.env['LD_LIBRARY_PATH']}"
    res = fake.run("launch", "--gpus", "1", *PREFLIGHT, *RANK)
    assert res.returncode == 3, res.stdout + res.stderr
    assert "sgpu: error: preflight: not checked: no NCCL: " in res.stderr
    assert "drop it to launch unchecked" in res.stderr
    assert not list(fake.cwd.glob("ran-*"))


def test_launch_preflight_usage_errors_exit_2_before_anything_starts(fake):
    for args, says in (
            (["--gpus", "2", "--preflight", "--set", "preflight.max_bytes=1T"], "preflight.max_bytes=1T: not a size"),
            (["--gpus", "2", "--preflight", "--set", "preflight.expect_busbw=fast"], "not a bandwidth"),
            (["--nproc", "2", "--preflight"], "--preflight: the preflight checks the job's GPUs, and this job runs "
                                               "2 CPU ranks; ask for GPUs (--gpus N), or drop it"),
            (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:29400", "--gpus-per-node", "1",
              "--preflight", "--set", "preflight.timeout=none"], "--set preflight.timeout=none: needs a limit")):
        res = fake.run("launch", *args, *RANK)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert says in res.stderr, (args, res.stderr)
        assert not list(fake.cwd.glob("ran-*"))


# Across nodes: static node 0 (this host's name) hosts the rendezvous, an agent
# named nodeb is node 1, both on this machine's fake GPUs. The fake NCCL's
# communicator is named by its unique id, which it draws at random: node 1's
# workers meet node 0's only if the id came through sgpu's rendezvous.
def two_nodes(fake, tmp_path, *args):
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    started = time.monotonic()
    n0 = static_node(fake, 2, 0, endpoint, secret, "--gpus-per-node", "2", *PREFLIGHT, *args, *RANK)
    a1 = agent(fake, endpoint, secret, "--node-name", "nodeb", "--node-rank", "1")
    o0, e0 = n0.communicate(timeout=60)
    _, e1 = a1.communicate(timeout=60)
    return (n0.returncode, o0, e0), (a1.returncode, e1), time.monotonic() - started


def test_preflight_across_nodes_passes_the_nccl_id_through_the_rendezvous(fake, tmp_path):
    (rc0, out, e0), (rc1, e1), _ = two_nodes(fake, tmp_path, "--set", "preflight.expect_busbw=0.0005")
    assert (rc0, rc1) == (0, 0), e0 + e1
    assert re.search(r"^sgpu: preflight: 4 GPUs on 2 nodes healthy in \d+\.\ds \(busbw [\d.]+ GB/s at 64 KiB\)$", e0,
                     re.M), e0
    assert sorted(p.name for p in fake.cwd.glob("ran-*")) == ["ran-0", "ran-1", "ran-2", "ran-3"]
    report = json.loads((run_dir_of(fake) / "preflight.json").read_text())
    assert report["status"] == "healthy"
    host = socket.gethostname()
    assert [(g["node"], g["index"]) for g in report["gpus"]] == [(host, 0), (host, 1), ("nodeb", 0), ("nodeb", 1)]
    assert [(l["node"], l["a"], l["b"]) for l in report["links"]] == [(host, 0, 1), ("nodeb", 0, 1)]
    sizes = report["allreduce"]["sizes"]
    assert [s["bytes"] for s in sizes] == [8 << k for k in range(14)]
    assert all(len(s["rank_time_us"]) == 4 for s in sizes)
    # nccl-tests' busbw over 4 ranks: algbw * 2(n-1)/n.
    assert sizes[-1]["busbw_gbps"] == pytest.approx(sizes[-1]["algbw_gbps"] * 1.5)
    assert report["allreduce"]["expected"]["source"] == "--expect-busbw"


def test_a_bad_gpu_on_another_node_stops_the_launch_naming_node_and_gpu(fake, tmp_path):
    fake.env["SGPU_FAKE_NCCL_WRONG"] = "3"  # global rank 3: nodeb's GPU 1
    (rc0, out, e0), (rc1, e1), took = two_nodes(fake, tmp_path)
    assert rc0 == 1, e0
    assert rc1 == 1, e1
    run_dir = run_dir_of(fake)
    assert re.search(r"^sgpu: error: preflight: failed in \d+\.\ds: node nodeb: GPU 1 \(00000000:19:00\.0\): 1 of 2 "
                     r"values wrong after the 8 B all-reduce .*; no rank was started \(report: "
                     + re.escape(str(run_dir / "preflight.json")) + r"\)$", e0, re.M), e0
    assert out == "" and not list(fake.cwd.glob("ran-*"))
    assert took < 20  # node 0's workers, waiting on nodeb's, were stopped, not left to their 3-minute limit
    assert json.loads((run_dir / "preflight.json").read_text())["status"] == "failed"
    assert workers_left(str(tmp_path)) == []


def test_a_hung_gpu_on_another_node_costs_the_limit_and_leaves_no_worker(fake, tmp_path):
    fake.env["SGPU_FAKE_NCCL_HANG"] = "2"  # nodeb's GPU 0
    (rc0, _, e0), (rc1, e1), took = two_nodes(fake, tmp_path, "--set", "preflight.timeout=2s")
    assert (rc0, rc1) == (1, 1), e0 + e1
    assert re.search(r"preflight: failed in \d+\.\ds: node \S+: the all-reduce did not finish within 2s at 8 B", e0), e0
    assert took < 15
    assert not list(fake.cwd.glob("ran-*"))
    assert workers_left(str(tmp_path)) == []


def test_cpu_ranks_on_a_node_refuse_the_preflight_naming_the_node(fake, tmp_path):
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    n0 = static_node(fake, 2, 0, endpoint, secret, "--gpus-per-node", "2", *PREFLIGHT, *RANK)
    a1 = agent(fake, endpoint, secret, "--node-name", "nodeb", "--node-rank", "1",
               env=dict(fake.env, SGPU_FAKE_DRIVER_GPUS="0"))
    _, e0 = n0.communicate(timeout=60)
    a1.communicate(timeout=60)
    assert n0.returncode == 2, e0
    # --gpus-per-node reaches every agent: a node without GPUs is refused for
    # what it lacks, before its preflight (it once ran a CPU rank instead).
    assert "node nodeb: " in e0 and "this node has no visible GPUs" in e0, e0
    assert not list(fake.cwd.glob("ran-*"))


# --preflight-only: sgpu doctor on exactly the job's GPUs, through any backend.
def test_preflight_only_is_doctor_on_the_jobs_gpus_with_no_entrypoint(fake):
    res = fake.run("launch", "--gpus", "1", "--preflight-only", "--set", "preflight.max_bytes=64K",
                   "--set", "preflight.iters=2")
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.startswith("sgpu doctor: 1 GPU, NCCL 2.28.9, ") and res.stdout.rstrip().endswith("healthy")
    summary = newest_summary(fake.env)
    assert summary["status"] == "not_started" and summary["exit_code"] == 0
    assert (run_dir_of(fake) / "preflight.json").exists()


def test_preflight_only_across_nodes_prints_one_report_and_starts_nothing(fake, tmp_path):
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    n0 = static_node(fake, 2, 0, endpoint, secret, "--gpus-per-node", "2", "--preflight-only", "-o", "json",
                     *PREFLIGHT[1:], *RANK)
    a1 = agent(fake, endpoint, secret, "--node-name", "nodeb", "--node-rank", "1")
    o0, e0 = n0.communicate(timeout=60)
    o1, e1 = a1.communicate(timeout=60)
    assert (n0.returncode, a1.returncode) == (0, 0), e0 + e1
    assert e1 == "" and o1 == ""  # the agent ends with the launcher's Finish, silently
    doc = json.loads(o0)
    assert doc["status"] == "healthy" and doc["exit_code"] == 0
    assert [g["node"] for g in doc["gpus"]][2:] == ["nodeb", "nodeb"]
    assert all(len(s["rank_time_us"]) == 4 for s in doc["allreduce"]["sizes"])
    assert not list(fake.cwd.glob("ran-*"))

    fake.env["SGPU_FAKE_DRIVER_ECC"] = "0:2"  # GPU 0 of both nodes
    n0 = static_node(fake, 2, 0, endpoint, secret, "--gpus-per-node", "2", "--preflight-only", *PREFLIGHT[1:])
    a1 = agent(fake, endpoint, secret, "--node-name", "nodeb", "--node-rank", "1")
    o0, e0 = n0.communicate(timeout=60)
    a1.communicate(timeout=60)
    assert n0.returncode == 1, e0
    assert re.search(r"^sgpu doctor: 4 GPUs on 2 nodes, NCCL 2\.28\.9, ", o0), o0
    assert re.search(r"^nodeb +0 +H100 .* fail: 2 uncorrectable ECC errors", o0, re.M), o0
    assert "FAIL\n  " in o0 and "nodeb GPU 0 (00000000:18:00.0): 2 uncorrectable ECC errors" in o0
