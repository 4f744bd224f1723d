"""--health-gate on one node: the job's GPUs read through NVML (the project's
fake driver, tests/fake_gpu, the one part that cannot run here) before the
first start and before every restart; a GPU that fails is left out for the
rest of the run and a spare GPU of the node takes its place. Faults that
appear while the job runs come from SGPU_FAKE_DRIVER_ECC_FILE, which the
fake NVML reads at each call."""
import json
import os
import pathlib
import shutil

from test_doctor import fake_libs

SHOW = ["--no-python", "/bin/sh", "-c",
        'echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT gpus $CUDA_VISIBLE_DEVICES"']
# Attempt 0: rank 0 makes GPU 1 report 2 uncorrectable ECC errors, then fails.
# Attempt 0 ends through rank 0 once it has broken the GPU: the other ranks
# wait to be stopped, so no other rank's end can stop rank 0 before it does.
BREAK_GPU_1 = ["--no-python", "/bin/sh", "-c",
               'echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT gpus $CUDA_VISIBLE_DEVICES"; '
               'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
               'if [ "$RANK" = 0 ]; then echo 1:2 > "$ECC_FILE"; exit 1; fi; exec sleep 60; fi']


def gpus(sgpu, n, **extra):
    dirs = fake_libs()
    return dict(sgpu.env, LD_LIBRARY_PATH=os.pathsep.join(str(dirs[k]) for k in ("cuda", "nvml")),
                SGPU_FAKE_DRIVER_GPUS=str(n), **extra)


def summary(sgpu):
    found = sorted(pathlib.Path(sgpu.env["SGPU_HOME"], "runs").glob("*/summary.json"))
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


def events(sgpu, kind):
    found = sorted(pathlib.Path(sgpu.env["SGPU_HOME"], "runs").glob("*/events.jsonl"))
    return [e for e in map(json.loads, found[0].read_text().splitlines()) if e["event"] == kind]


def seen(stdout):
    return sorted(line.split("] ", 1)[-1] for line in stdout.splitlines() if "attempt" in line)


def attempt_1(stdout):
    """The ranks' lines of attempt 1: those of attempt 0 after the first failure may not come, stopped by it."""
    return [line for line in seen(stdout) if "attempt 1" in line]


def test_a_gpu_with_ecc_errors_is_left_out_at_the_start_and_a_spare_takes_its_place(sgpu):
    res = sgpu.run("launch", "--gpus", 2, *SHOW, env=gpus(sgpu, 3, SGPU_FAKE_DRIVER_ECC="1:2"))
    assert res.returncode == 0, res.stderr
    assert seen(res.stdout) == ["rank 0 attempt 0 gpus 0,2", "rank 1 attempt 0 gpus 0,2"], res.stdout
    assert ("sgpu: warning: GPU 1 fails the health gate: 2 uncorrectable ECC errors since the driver loaded; "
            "left out for the rest of the run (attempt 0 on)") in res.stderr
    assert summary(sgpu)["excluded"] == [
        {"host": None, "gpu": 1, "reason": "2 uncorrectable ECC errors since the driver loaded", "attempt": 0}]
    assert [e["gpu"] for e in events(sgpu, "excluded")] == [1]


def test_a_gpu_that_fails_during_an_attempt_is_replaced_by_a_spare_at_the_restart(sgpu, tmp_path):
    ecc = tmp_path / "ecc"
    ecc.write_text("")
    env = gpus(sgpu, 3, SGPU_FAKE_DRIVER_ECC_FILE=str(ecc), ECC_FILE=str(ecc))
    res = sgpu.run("launch", "--gpus", 2, "--max-restarts", 1, "--restart-backoff", "0.1s", *BREAK_GPU_1, env=env)
    assert res.returncode == 0, res.stderr
    assert "rank 0 attempt 0 gpus 0,1" in seen(res.stdout), res.stdout
    assert attempt_1(res.stdout) == [
        "rank 0 attempt 1 gpus 0,2", "rank 1 attempt 1 gpus 0,2"], res.stdout
    s = summary(sgpu)
    assert s["excluded"] == [
        {"host": None, "gpu": 1, "reason": "2 uncorrectable ECC errors since the driver loaded", "attempt": 1}]
    assert [a["exit_code"] for a in s["attempts"]] == [1, 0]


def xid_job(xid):
    """Attempt 0: rank 0 makes GPU 1 report XID `xid` (the driver's critical-error event), then fails; the
    other ranks wait to be stopped (as BREAK_GPU_1)."""
    return ["--no-python", "/bin/sh", "-c",
            'echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT gpus $CUDA_VISIBLE_DEVICES"; '
            'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
            f'if [ "$RANK" = 0 ]; then echo 1:{xid} >> "$XID_FILE"; exit 1; fi; exec sleep 60; fi']


def test_a_gpu_that_reported_a_hardware_xid_is_replaced_at_the_restart_and_a_programs_xid_is_not(sgpu, tmp_path):
    runs = {}
    for xid in (79, 13):  # fell off the bus; a graphics exception, which a program causes
        xids = tmp_path / f"xids-{xid}"
        xids.write_text("0:48\n")  # before the run: not the job's attempt's
        env = gpus(sgpu, 3, SGPU_FAKE_DRIVER_XID_FILE=str(xids), XID_FILE=str(xids),
                   SGPU_HOME=str(tmp_path / f"home-{xid}"))
        res = sgpu.run("launch", "--gpus", 2, "--max-restarts", 1, "--restart-backoff", "0.1s", *xid_job(xid),
                       env=env)
        assert res.returncode == 0, res.stderr
        runs[xid] = (res, json.loads(next((tmp_path / f"home-{xid}" / "runs").glob("*/summary.json")).read_text()))
    res, s = runs[79]
    assert "rank 0 attempt 0 gpus 0,1" in seen(res.stdout), res.stdout
    assert attempt_1(res.stdout) == [
        "rank 0 attempt 1 gpus 0,2", "rank 1 attempt 1 gpus 0,2"], res.stdout
    assert s["excluded"] == [
        {"host": None, "gpu": 1, "reason": "XID 79 (the GPU fell off the bus) during attempt 0", "attempt": 1}]
    assert "GPU 1 fails the health gate: XID 79 (the GPU fell off the bus) during attempt 0" in res.stderr
    res, s = runs[13]
    assert attempt_1(res.stdout) == [
        "rank 0 attempt 1 gpus 0,1", "rank 1 attempt 1 gpus 0,1"], res.stdout
    assert s["excluded"] == [] and "health gate" not in res.stderr


def test_no_spare_left_at_a_restart_ends_the_run_with_the_failed_attempts_code(sgpu, tmp_path):
    ecc = tmp_path / "ecc"
    ecc.write_text("")
    env = gpus(sgpu, 2, SGPU_FAKE_DRIVER_ECC_FILE=str(ecc), ECC_FILE=str(ecc))
    res = sgpu.run("launch", "--gpus", 2, "--max-restarts", 3, "--restart-backoff", "0.1s", *BREAK_GPU_1, env=env)
    assert res.returncode == 1, res.stderr
    assert "sgpu: error: attempt 1 cannot start: GPU 1 (2 uncorrectable ECC errors since the driver loaded) failed " \
           "the health gate, and no spare GPU is left to take its place" in res.stderr, res.stderr
    assert "attempt 1 gpus" not in res.stdout
    s = summary(sgpu)
    assert s["exit_code"] == 1 and len(s["attempts"]) == 1
    assert [e["gpu"] for e in s["excluded"]] == [1]


def test_no_spare_at_the_start_is_an_error_before_anything_starts(sgpu):
    res = sgpu.run("launch", "--gpus", 2, *SHOW, env=gpus(sgpu, 2, SGPU_FAKE_DRIVER_ECC="1:2"))
    assert res.returncode == 1, res.stderr
    assert "GPU 1 (2 uncorrectable ECC errors since the driver loaded) failed the health gate, and no spare GPU is " \
           "left to take its place" in res.stderr
    assert "attempt" not in res.stdout


def test_a_gpu_another_process_holds_is_left_out_and_the_gate_can_be_turned_off(sgpu):
    res = sgpu.run("launch", "--gpus", 1, *SHOW, env=gpus(sgpu, 2, SGPU_FAKE_DRIVER_PIDS="0:4242"))
    assert res.returncode == 0, res.stderr
    assert seen(res.stdout) == ["rank 0 attempt 0 gpus 1"], res.stdout
    assert "GPU 0 fails the health gate: in use by process 4242, which is not the job's" in res.stderr
    off = sgpu.run("launch", "--gpus", 2, "--health-gate", "off", *SHOW, env=gpus(sgpu, 2, SGPU_FAKE_DRIVER_ECC="1:2"))
    assert off.returncode == 0, off.stderr
    assert seen(off.stdout) == ["rank 0 attempt 0 gpus 0,1", "rank 1 attempt 0 gpus 0,1"]
    assert "health gate" not in off.stderr


def test_without_nvml_the_gate_says_so_once_and_the_job_runs(sgpu, tmp_path):
    env = gpus(sgpu, 2)
    env["LD_LIBRARY_PATH"] = str(fake_libs()["cuda"])  # GPUs found through CUDA, no NVML to read them
    res = sgpu.run("launch", "--gpus", 2, "--max-restarts", 1, "--restart-backoff", "0.1s", "--no-python", "/bin/sh",
                   "-c", '[ "$TORCHELASTIC_RESTART_COUNT" = 1 ]', env=env)
    assert res.returncode == 0, res.stderr
    assert res.stderr.count("the health gate could not read the GPUs' health") == 1, res.stderr
    assert summary(sgpu)["excluded"] == []


def two_gated_nodes(sgpu, tmp_path, node1_env, *args):
    """Node 0 (static, 2 healthy fake GPUs) and node 1 ("nodeb", an agent with `node1_env`'s fake GPUs), 2 GPUs each."""
    from multinode import agent, free_port, make_secret_file, static_node
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "--gpus-per-node", 2, *args, env=gpus(sgpu, 2))
    a1 = agent(sgpu, endpoint, secret, "--node-name", "nodeb", "--node-rank", 1, env=node1_env)
    o0, e0 = n0.communicate(timeout=60)
    _, e1 = a1.communicate(timeout=60)
    return n0.returncode, o0, e0 + e1


def test_on_several_nodes_each_agent_gates_its_gpus_and_a_spare_of_its_node_takes_a_bad_ones_place(sgpu, tmp_path):
    rc, out, err = two_gated_nodes(sgpu, tmp_path, gpus(sgpu, 3, SGPU_FAKE_DRIVER_ECC="1:2"), *SHOW)
    assert rc == 0, err
    assert seen(out) == ["rank 0 attempt 0 gpus 0,1", "rank 1 attempt 0 gpus 0,1",
                         "rank 2 attempt 0 gpus 0,2", "rank 3 attempt 0 gpus 0,2"], out
    assert ("sgpu: warning: nodeb GPU 1 fails the health gate: 2 uncorrectable ECC errors since the driver loaded; "
            "left out for the rest of the run (attempt 0 on)") in err
    assert summary(sgpu)["excluded"] == [
        {"host": "nodeb", "gpu": 1, "reason": "2 uncorrectable ECC errors since the driver loaded", "attempt": 0}]
    assert [e["host"] for e in events(sgpu, "excluded")] == ["nodeb"]


def test_on_several_nodes_an_xid_during_an_attempt_moves_the_next_to_a_spare_and_none_left_ends_the_run(sgpu,
                                                                                                       tmp_path):
    # Attempt 0: rank 2 (nodeb's first) makes nodeb's GPU 1 report XID 79 and fails; the others wait to be
    # stopped (had they failed too, theirs could end the attempt before rank 2 wrote the XID).
    xids = tmp_path / "xids"
    xids.write_text("")
    job = ["--no-python", "/bin/sh", "-c",
           'echo "rank $RANK attempt $TORCHELASTIC_RESTART_COUNT gpus $CUDA_VISIBLE_DEVICES"; '
           'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
           'if [ "$RANK" = 2 ]; then echo 1:79 >> "$XID_FILE"; exit 1; fi; exec sleep 30; fi']
    env = gpus(sgpu, 3, SGPU_FAKE_DRIVER_XID_FILE=str(xids), XID_FILE=str(xids))
    rc, out, err = two_gated_nodes(sgpu, tmp_path, env, "--max-restarts", 1, "--restart-backoff", "0.1s", *job)
    assert rc == 0, err
    assert attempt_1(out) == [
        "rank 0 attempt 1 gpus 0,1", "rank 1 attempt 1 gpus 0,1", "rank 2 attempt 1 gpus 0,2",
        "rank 3 attempt 1 gpus 0,2"], out
    assert summary(sgpu)["excluded"] == [
        {"host": "nodeb", "gpu": 1, "reason": "XID 79 (the GPU fell off the bus) during attempt 0", "attempt": 1}]
    # The same with no GPU of nodeb to spare: attempt 1 cannot start there, and the run ends with attempt 0's code.
    shutil.rmtree(pathlib.Path(sgpu.env["SGPU_HOME"]), ignore_errors=True)
    xids.write_text("")
    rc, out, err = two_gated_nodes(sgpu, tmp_path, gpus(sgpu, 2, SGPU_FAKE_DRIVER_XID_FILE=str(xids),
                                                        XID_FILE=str(xids)),
                                   "--max-restarts", 1, "--restart-backoff", "0.1s", *job)
    assert rc == 1, err + out
    assert ("node nodeb: attempt 1 cannot start: GPU 1 (XID 79 (the GPU fell off the bus) during attempt 0) failed "
            "the health gate, and no spare GPU is left to take its place") in err, err
    assert not [line for line in attempt_1(out) if "rank 2" in line], out
