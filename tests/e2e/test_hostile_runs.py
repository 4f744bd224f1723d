"""The runs directory in a hostile environment: a corrupt state.json among
good runs, a full disk, thousands of old runs, a run directory deleted while
its run is live, a huge last line, a lost run's duration."""
import json
import os
import pathlib
import shutil
import signal
import subprocess
import time

import pytest

from multinode import all_dead, wait_for


def launch_json(sgpu, *args, env=None):
    res = sgpu.run("launch", "-o", "json", *args, env=env)
    return res, json.loads(res.stdout)


def runs_dir(sgpu):
    return pathlib.Path(sgpu.env["SGPU_HOME"], "runs")


def run_names(root):
    """The runs under a runs directory (hidden entries, the trash, are not runs)."""
    return sorted(p.name for p in pathlib.Path(root).iterdir() if not p.name.startswith("."))


def fake_run(template, root, run_id, **changes):
    """A copy of a real finished run under another id, its state.json changed (None drops a key)."""
    dest = pathlib.Path(root, run_id)
    shutil.copytree(template, dest)
    state = json.loads((dest / "state.json").read_text())
    for key, value in changes.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    state["run_id"] = run_id
    (dest / "state.json").write_text(json.dumps(state))
    return dest


@pytest.mark.parametrize("changes, problem", [
    ({"state": None}, "'state' is missing"),
    ({"world_size": None}, "'world_size' is missing"),
    ({"world_size": 2 ** 31}, "'world_size' is 2147483648"),
    ({"exit_code": -5}, "'exit_code' is -5"),
    ({"detached": "yes"}, "'detached' is \"yes\""),
    ({"started_at": 7}, "'started_at' is 7"),
])
def test_a_corrupt_state_json_is_listed_with_its_problem_and_hides_no_run(sgpu, changes, problem):
    _, older = launch_json(sgpu, "--no-python", "true")
    _, good = launch_json(sgpu, "--nproc", 2, "--no-python", "true")
    root = runs_dir(sgpu)
    bad_id = "29991231-235959-abcdef"  # the newest
    bad = fake_run(root / good["run_id"], root, bad_id, **changes)
    res = sgpu.run("runs")
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines()[1:]]
    assert [r[0] for r in rows] == [bad_id, good["run_id"], older["run_id"]]
    assert rows[0][1] == "unknown" and rows[1][1] == "succeeded"
    assert "-2147483648" not in res.stdout
    assert f"{bad}/state.json: {problem}" in res.stderr
    listed = json.loads(sgpu.run("runs", "-o", "json").stdout)
    assert [(r["run_id"], r["state"]) for r in listed] == [
        (bad_id, "unknown"), (good["run_id"], "succeeded"), (older["run_id"], "succeeded")]
    assert problem in listed[0]["problem"] and "problem" not in listed[1]
    # `last` is the unreadable run, and nothing acts on it in its place.
    for verb in (("cancel", "last"), ("wait", "last"), ("logs", "last"), ("cancel", bad_id[:8])):
        refused = sgpu.run(*verb)
        assert refused.returncode == 1, (verb, refused.stderr)
        assert f"run {bad_id}" in refused.stderr and problem in refused.stderr
    shown = sgpu.run("status", "last")
    assert shown.returncode == 0 and "unknown" in shown.stdout and problem in shown.stdout
    assert json.loads(sgpu.run("status", good["run_id"], "-o", "json").stdout)["state"] == "succeeded"


def test_state_json_that_is_not_json_is_listed_too(sgpu):
    _, good = launch_json(sgpu, "--no-python", "true")
    root = runs_dir(sgpu)
    bad = fake_run(root / good["run_id"], root, "29991231-235959-000001")
    (bad / "state.json").write_text('{"state": "succ')
    res = sgpu.run("runs", "-o", "json")
    assert res.returncode == 0, res.stderr
    listed = json.loads(res.stdout)
    assert [r["state"] for r in listed] == ["unknown", "succeeded"]
    assert listed[0]["problem"] == f"{bad}/state.json: not valid JSON"


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs: a job that prints more fills it."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("this machine cannot mount a tmpfs")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)])


def test_a_full_disk_leaves_no_temporary_files_and_the_run_is_not_lost(sgpu, small_disk):
    env = dict(sgpu.env, SGPU_HOME=str(small_disk / "home"))
    fill = "head -c 1000000 /dev/zero | tr '\\0' x; echo"
    res = sgpu.run("launch", "--no-python", "sh", "-c", fill, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    leftovers = [str(p) for p in small_disk.rglob("*.tmp")]
    assert leftovers == []
    listed = json.loads(sgpu.run("runs", "-o", "json", env=env).stdout)
    assert len(listed) == 1
    assert (listed[0]["state"], listed[0]["exit_code"]) == ("succeeded", 0), listed[0]


def make_old_runs(template, root, count):
    """`count` finished runs, older than any real one: copies of a real run's files."""
    files = {p.relative_to(template): p.read_bytes() for p in template.rglob("*") if p.is_file()}
    dirs = sorted({p.relative_to(template) for p in template.rglob("*") if p.is_dir()})
    state = json.loads((template / "state.json").read_text())
    for i in range(count):
        run_id = f"2020{1 + i // 100 % 12:02d}{1 + i % 28:02d}-{i // 3600 % 24:02d}{i // 60 % 60:02d}{i % 60:02d}-{i:06x}"
        dest = root / run_id
        dest.mkdir(mode=0o700)
        for d in dirs:
            (dest / d).mkdir(parents=True, exist_ok=True)
        for rel, data in files.items():
            (dest / rel).write_bytes(data)
        (dest / "state.json").write_text(json.dumps(dict(state, run_id=run_id)))


def test_a_launch_among_2500_old_runs_costs_what_one_in_an_empty_home_does(sgpu, tmp_path):
    args = ("launch", "--keep-runs", 100, "--nproc", 2, "--no-python", "true")
    empty_env = dict(sgpu.env, SGPU_HOME=str(tmp_path / "empty"))
    full_env = dict(sgpu.env, SGPU_HOME=str(tmp_path / "full"))
    res, first = launch_json(sgpu, "--nproc", 2, "--no-python", "true", env=full_env)
    assert res.returncode == 0, res.stderr
    root = tmp_path / "full" / "runs"
    make_old_runs(root / first["run_id"], root, 2500)
    assert len(run_names(root)) == 2501
    sgpu.run(*args, env=empty_env)  # warm
    t0 = time.monotonic()
    assert sgpu.run(*args, env=empty_env).returncode == 0
    empty_took = time.monotonic() - t0
    t0 = time.monotonic()
    res = sgpu.run(*args, env=full_env)
    full_took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert full_took < empty_took + 1.0, (full_took, empty_took)
    # The old runs go in the background; the newest 100 stay, the new run and the first among them.
    # The deleter keeps the newest retired run, for the next launch to take.
    trash = root / ".trash"
    wait_for(lambda: len(run_names(root)) == 100 and len(os.listdir(trash)) <= 1, 300,
             "the old runs to be deleted")  # bounded; a second or two on a quiet machine
    assert all(name.startswith("2020") for name in os.listdir(trash)), os.listdir(trash)
    assert first["run_id"] in run_names(root)
    newest = json.loads(sgpu.run("runs", "--limit", 1, "-o", "json", env=full_env).stdout)[0]
    assert newest["state"] == "succeeded" and newest["run_id"] not in (first["run_id"],)


def test_retention_retires_old_runs_into_the_trash_for_a_batch(sgpu):
    env = dict(sgpu.env, SGPU_KEEP_RUNS="2")
    ids = [launch_json(sgpu, "--no-python", "true", env=env)[1]["run_id"] for _ in range(4)]
    root = runs_dir(sgpu)
    assert run_names(root) == sorted(ids[2:])
    # Retired runs wait in the trash (a hidden directory of the runs directory)
    # for a batch, or for a later launch to take one as its own directory: the
    # last launch may have taken the first retired, leaving what that run
    # held in the trash instead (its events; its state, spec and summary it
    # kept to overwrite).
    trash = sorted(p.name for p in (root / ".trash").iterdir())
    assert trash in (sorted(ids[:2]), [f".old-{ids[3]}-0", ids[1]]), trash
    assert (root / ".trash").stat().st_mode & 0o777 == 0o700


def test_retention_retires_old_runs_while_the_new_run_s_ranks_run(sgpu, tmp_path):
    """README: once the run's first rank has started, the runs beyond --keep-runs go into the trash, while it runs."""
    env = dict(sgpu.env, SGPU_HOME=str(tmp_path / "home"), SGPU_KEEP_RUNS="1")
    res, first = launch_json(sgpu, "--no-python", "true", env=env)
    assert res.returncode == 0, res.stderr
    root = tmp_path / "home" / "runs"
    started = tmp_path / "started"
    res = sgpu.run("launch", "--detach", "--no-python", "sh", "-c", f"touch {started}; exec sleep 60", env=env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    try:
        wait_for(started.exists, 20, "the rank to start")
        # The running run is the one kept; the finished one is in the trash already.
        wait_for(lambda: run_names(root) == [run_id], 20, "the older run to be retired")
        assert first["run_id"] in os.listdir(root / ".trash")
        assert json.loads(sgpu.run("status", run_id, "-o", "json", env=env).stdout)["state"] == "running"
    finally:
        sgpu.run("cancel", run_id, env=env)


def test_a_launch_in_a_full_runs_directory_takes_a_retired_run_and_shows_none_of_it(sgpu, tmp_path):
    """Steady state: each launch retires one run and a later one takes its directory (its inodes) for its own."""
    env = dict(sgpu.env, SGPU_HOME=str(tmp_path / "home"), SGPU_KEEP_RUNS="3")
    script = 'echo "old out $RANK"; echo "old err $RANK" >&2; echo 7 > "$SGPU_RESULT_FILE"'
    res, first = launch_json(sgpu, "--nproc", 3, "--no-python", "sh", "-c", script, env=env)
    assert res.returncode == 0, res.stderr
    root = tmp_path / "home" / "runs"
    make_old_runs(root / first["run_id"], root, 3)  # of 2020: none shares the new runs' second
    oldest = sorted(run_names(root))[:2]
    inodes = {(root / name).stat().st_ino for name in oldest}
    file_inodes = {p.stat().st_ino for name in oldest for p in (root / name).rglob("*") if p.is_file()}
    # Four runs, three kept: after its report, this launch retires the two oldest into the trash.
    res, second = launch_json(sgpu, "--nproc", 2, "--no-python", "true", env=env)
    assert res.returncode == 0, res.stderr
    assert sorted(os.listdir(root / ".trash")) == oldest
    # The next launch's directory is one of them, holding nothing of its old run.
    script = 'test "$RANK" = 1 && echo "new out $RANK"; true'
    res, third = launch_json(sgpu, "--nproc", 2, "--no-python", "sh", "-c", script, env=env)
    assert res.returncode == 0, res.stderr
    run = root / third["run_id"]
    assert run.stat().st_ino in inodes
    # One taken, one more retired; what the taken one held waits there for
    # the deleter, a name each (its events, logs, results, third rank).
    trash = set(os.listdir(root / ".trash"))
    retired = [name for name in trash if not name.startswith(".")]
    assert len(retired) == 2 and set(retired) - set(oldest), trash
    junk = trash - set(retired)
    assert junk == {f".old-{third['run_id']}-{i}" for i in range(len(junk))} and len(junk) >= 4, trash
    files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if not p.name.startswith(".spare-"))
    assert files == ["events.jsonl", "lock", "ranks", "ranks/0", "ranks/0/stderr", "ranks/0/stdout", "ranks/1",
                     "ranks/1/stderr", "ranks/1/stdout", "spec.json", "state.json", "summary.json"], files
    # The old run's state, spec and summary were overwritten by this run's
    # (their inodes, no file made for them); what is left of them (hidden
    # spares for the next run) is this run's.
    assert {(run / f).stat().st_ino for f in ("state.json", "spec.json", "summary.json")} <= file_inodes
    spares = list(run.glob(".spare-*"))
    assert spares, files
    for spare in spares:
        assert first["run_id"] not in spare.read_text() and third["run_id"] in spare.read_text(), spare
    logs = sgpu.run("logs", third["run_id"], env=env)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == ["[1] new out 1"], logs.stdout
    assert [(run / "ranks" / r / s).stat().st_size for r in "01" for s in ("stdout", "stderr")] == [0, 0, 10, 0]
    assert run.stat().st_mode & 0o777 == 0o700
    events = [json.loads(line)["event"] for line in (run / "events.jsonl").read_text().splitlines()]
    assert events[0] == "run_started" and events.count("run_started") == 1, events
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run_id"] == third["run_id"] and summary["world_size"] == 2
    listed = json.loads(sgpu.run("runs", "-o", "json", env=env).stdout)
    assert [r["run_id"] for r in listed] == [third["run_id"], second["run_id"], first["run_id"]]
    assert listed[0]["state"] == "succeeded" and listed[0]["world_size"] == 2


def test_a_killed_sgpu_in_a_recycled_run_directory_leaves_a_lost_run_of_its_own(sgpu, tmp_path):
    env = dict(sgpu.env, SGPU_HOME=str(tmp_path / "home"), SGPU_KEEP_RUNS="1")
    res, first = launch_json(sgpu, "--no-python", "sh", "-c", "echo old", env=env)
    assert res.returncode == 0, res.stderr
    root = tmp_path / "home" / "runs"
    make_old_runs(root / first["run_id"], root, 1)  # of 2020
    inodes = {(root / name).stat().st_ino for name in run_names(root)}
    res, _ = launch_json(sgpu, "--no-python", "true", env=env)  # retires both into the trash
    assert res.returncode == 0 and len(os.listdir(root / ".trash")) == 2, res.stderr
    started = tmp_path / "started"
    res = sgpu.run("launch", "--detach", "--no-python", "sh", "-c", f"touch {started}; exec sleep 60", env=env)
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    assert (root / run_id).stat().st_ino in inodes  # a retired run's directory
    wait_for(started.exists, 20, "the rank to start")
    pid = json.loads(sgpu.run("status", run_id, "-o", "json", env=env).stdout)["sgpu_pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: all_dead([pid]), 20, "sgpu to die")
    st = json.loads(sgpu.run("status", run_id, "-o", "json", env=env).stdout)
    assert st["state"] == "lost" and st["run_id"] == run_id, st
    assert sgpu.run("logs", run_id, env=env).stdout == ""  # nothing of the old run's "old"


def test_logs_tail_shows_the_end_of_a_huge_last_line(sgpu):
    script = "echo first; head -c 20000000 /dev/zero | tr '\\0' x; echo END"
    res, summary = launch_json(sgpu, "--no-python", "sh", "-c", script)
    assert res.returncode == 0
    tail = sgpu.run("logs", summary["run_id"], "--tail", 1)
    assert tail.returncode == 0, tail.stderr
    lines = tail.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("[0] ") and lines[0].endswith("xxxxEND")
    assert len(lines[0]) < 9 << 20
    assert "cut" in tail.stderr


def test_a_lost_run_did_not_take_zero_seconds(sgpu, tmp_path):
    started = tmp_path / "started"
    res = sgpu.run("launch", "--detach", "--no-python", "sh", "-c", f"sleep 0.3; touch {started}; exec sleep 60")
    assert res.returncode == 0, res.stderr
    run_id = res.stdout.strip()
    wait_for(started.exists, 20, "the rank to start")
    pid = json.loads(sgpu.run("status", run_id, "-o", "json").stdout)["sgpu_pid"]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: all_dead([pid]), 20, "sgpu to die")
    st = json.loads(sgpu.run("status", run_id, "-o", "json").stdout)
    assert st["state"] == "lost"
    assert st["duration_s"] is None or st["duration_s"] >= 0.3
    text = sgpu.run("status", run_id).stdout
    assert "took 0.0s" not in text


def test_a_short_run_whose_directory_is_deleted_says_so_and_keeps_its_end(sgpu):
    """No watch is made for a run under a second (closing one costs 6-16 ms): the teardown's check finds it."""
    # sgpu may be creating the rank's log (for "before") while rm walks the directory: rm again until it is gone.
    script = 'echo before; d="${SGPU_RESULT_FILE%/ranks/*}"; until rm -rf "$d" 2>/dev/null; do :; done; echo after'
    p = sgpu.run("launch", "-o", "json", "--nproc", 1, "--no-python", "sh", "-c", script)
    summary = json.loads(p.stdout)
    assert p.returncode == 0 and summary["exit_code"] == 0, p.stderr
    run_dir = pathlib.Path(summary["run_dir"])
    assert p.stderr.count(f"the run directory {run_dir} was deleted while the run was live") == 1
    assert run_dir.stat().st_mode & 0o777 == 0o700
    assert json.loads((run_dir / "summary.json").read_text())["exit_code"] == 0
    assert json.loads((run_dir / "state.json").read_text())["state"] == "succeeded"
    assert json.loads(sgpu.run("runs", "-o", "json").stdout)[0]["state"] == "succeeded"


def test_every_rank_keeps_both_logs_and_one_rank_s_output_stays_its_own(sgpu):
    """Logs nothing was written to are links to one empty file: they exist, are empty, and stay so."""
    # The first attempt fails through rank 2 once it has written, so no other rank's end can stop it before its line;
    # the others wait to be stopped.
    script = ('if [ "$RANK" = 2 ]; then echo two >&2; fi; [ "$TORCHELASTIC_RESTART_COUNT" = 1 ] && exit 0; '
              '[ "$RANK" = 2 ] && exit 3; exec sleep 60')
    p = sgpu.run("launch", "-o", "json", "--nproc", 4, "--max-restarts", 1, "--no-python", "sh", "-c", script)
    summary = json.loads(p.stdout)
    assert summary["exit_code"] == 0, p.stderr
    ranks = pathlib.Path(summary["run_dir"]) / "ranks"
    for attempt in ("", "attempt-0"):
        for r in range(4):
            for stream in ("stdout", "stderr"):
                log = ranks / str(r) / attempt / stream
                expected = "two\n" if (r, stream) == (2, "stderr") else ""
                assert log.read_text() == expected, (log, log.read_text())
    res = sgpu.run("logs", "last", "--rank", 2)
    assert res.returncode == 0 and "two" in res.stdout + res.stderr


def test_a_run_directory_deleted_while_live_is_said_and_made_again(sgpu, tmp_path):
    started = tmp_path / "started"
    script = f"touch {started}.$RANK; exec sleep 60"
    p = sgpu.popen("launch", "-o", "json", "--nproc", 2, "--no-python", "sh", "-c", script)
    try:
        wait_for(lambda: all(pathlib.Path(f"{started}.{r}").exists() for r in range(2)), 30, "the ranks to start")
        (run_dir,) = [p for p in runs_dir(sgpu).iterdir() if not p.name.startswith(".")]
        shutil.rmtree(run_dir)
        wait_for(lambda: (run_dir / "state.json").exists(), 10, "the run directory to be made again")
        assert run_dir.stat().st_mode & 0o777 == 0o700
        st = sgpu.run("status", "last", "-o", "json")
        assert st.returncode == 0, st.stderr
        assert json.loads(st.stdout)["state"] == "running"
        res = sgpu.run("cancel", "last")
        assert res.returncode == 0, res.stderr
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    summary = json.loads(out)
    assert summary["status"] == "interrupted" and p.returncode == summary["exit_code"] != 0
    assert err.count(f"the run directory {run_dir} was deleted while the run was live") == 1
    assert json.loads((run_dir / "summary.json").read_text())["exit_code"] == summary["exit_code"]
    assert json.loads(sgpu.run("runs", "-o", "json").stdout)[0]["state"] == "cancelled"
