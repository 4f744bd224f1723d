"""Supervision that never stalls: a reader that stops reading, MASTER_PORT
that any program can bind, a thousand ranks on one node, Ctrl-C during a
large start. Each drives the real binary."""
import glob
import json
import os
import resource
import signal
import socket
import subprocess
import time

import pytest

from conftest import SANITIZED, TORCH_PYTHON, python_program
from test_output import console_segments, log, lossless, per_rank, run_dir


def no_python(*program):
    return ["--no-python", TORCH_PYTHON, "-S", "-u", *program]


@pytest.mark.alone  # a teardown bound of seconds
def test_the_timeout_holds_while_nobody_reads_stdout(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    unread, stdout = os.pipe()  # sgpu's stdout: never read while it runs
    with open(tmp_path / "stderr", "wb") as stderr:
        start = time.monotonic()
        p = subprocess.Popen([sgpu.bin, "launch", "--nproc", "2", "--timeout", "3s",
                              *no_python(python_program("lossless.py"), "400000", "forever")],
                             env=env, cwd=sgpu.cwd, stdout=stdout, stderr=stderr)
        os.close(stdout)
        try:
            code = p.wait(timeout=30)
        finally:
            p.kill()
            os.close(unread)
    elapsed = time.monotonic() - start
    err = (tmp_path / "stderr").read_text(errors="replace")
    assert code == 124, err[-2000:]
    # 3 s and the teardown, which under ASan beside other tests (scripts/test
    # runs several at once) took 2 s; a stdout held by the reader would hold
    # sgpu until this test's 30 s wait gave up.
    assert elapsed < 10, elapsed
    assert "bytes of the job's output were not shown" in err
    for r in range(2):
        # The console could not show it all, the logs still have every byte the rank wrote.
        blob = lossless.data(r, "o", 400_000)
        got = log(sgpu, r, "stdout")
        counted = int((out / f"count-{r}-o").read_text())
        assert counted <= len(got) <= counted + 20_000, (r, counted, len(got))
        assert got == (blob * (len(got) // len(blob) + 1))[:len(got)]


@pytest.fixture
def frozen_disk(tmp_path):
    """A small ext4 file system of its own (a loop device), and a function
    that freezes it (fsfreeze): every write to it then waits, as on a hung
    network disk, until the fixture thaws it."""
    image, mnt = tmp_path / "disk.img", tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a loop device needs root")
    subprocess.run(["truncate", "-s", "64M", str(image)], check=True)
    subprocess.run(["mkfs.ext4", "-q", str(image)], check=True)
    if subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("this machine cannot mount a loop device")
    frozen = []

    def freeze():
        subprocess.run(["fsfreeze", "-f", str(mnt)], check=True)
        frozen.append(True)

    def thaw():
        if frozen:
            subprocess.run(["fsfreeze", "-u", str(mnt)], check=True)
            frozen.clear()

    try:
        yield mnt, freeze, thaw
    finally:
        thaw()
        subprocess.run(["umount", str(mnt)])


@pytest.mark.alone  # a teardown bound of seconds
def test_the_timeout_holds_while_the_console_file_s_disk_is_stuck(sgpu, tmp_path, frozen_disk):
    # sgpu's stdout is a file on a disk that stops taking writes (a hung NFS
    # server, a frozen file system): the timeout must still end the ranks.
    mnt, freeze, thaw = frozen_disk
    env = dict(sgpu.env, OMP_NUM_THREADS="1")
    script = "import sys\nwhile True: sys.stdout.write('x' * 99 + '\\n')\n"
    with open(mnt / "console", "wb") as stdout:  # opened before the freeze: an open would wait too
        freeze()
        start = time.monotonic()
        p = subprocess.Popen([sgpu.bin, "launch", "--nproc", "2", "--timeout", "3s", *no_python("-c", script)],
                             env=env, cwd=sgpu.cwd, stdout=stdout, stderr=subprocess.PIPE)
    try:
        # The ranks' ends are in the run directory (not on the frozen disk) as
        # soon as sgpu has stopped them.
        ended = []
        while time.monotonic() - start < 30 and len(ended) < 2 and p.poll() is None:
            time.sleep(0.1)
            runs = glob.glob(os.path.join(sgpu.env["SGPU_HOME"], "runs", "*", "events.jsonl"))
            events = [json.loads(line) for line in open(runs[0])] if runs else []
            ended = [e for e in events if e["event"] == "rank_exited"]
        elapsed = time.monotonic() - start
        assert len(ended) == 2 and all(e["terminated_by_sgpu"] for e in ended), ended
        assert elapsed < 8, elapsed  # 3 s and the teardown, not held by the disk
        assert p.poll() is None  # sgpu still waits for the disk to take the console's bytes
    finally:
        thaw()
    _, err = p.communicate(timeout=60)
    assert p.returncode == 124, err[-2000:]
    assert b"were not shown" not in err
    # Every byte the ranks wrote reached the file once the disk took it (the
    # console ends a rank's last, unfinished line), and no more were read than
    # a few MiB: the stuck disk held the ranks back, as a lagging reader does.
    console = per_rank(console_segments((mnt / "console").read_bytes()), 2)
    logs = [log(sgpu, r, "stdout") for r in range(2)]
    for r in range(2):
        assert logs[r], f"rank {r} printed nothing"
        assert console[r] == logs[r] + (b"" if logs[r].endswith(b"\n") else b"\n"), f"rank {r}"
    assert sum(map(len, logs)) < 32 << 20, [len(x) for x in logs]


def test_a_slow_reader_gets_every_line_and_holds_the_ranks_back(sgpu, tmp_path):
    # 40 MB from one rank into a pipe read only after a pause: sgpu buffers at
    # most a few MB, so the rank must have waited for the reader.
    script = "import sys\nfor i in range(400_000): sys.stdout.write(f'{i:099d}\\n')\n"
    p = subprocess.Popen([sgpu.bin, "launch", "--nproc", "1", *no_python("-c", script)], env=sgpu.env, cwd=sgpu.cwd,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    first = b""
    while len(first) < 1 << 20:  # then stop reading for a while: the rank blocks
        first += p.stdout.read(1 << 20)
    time.sleep(0.5)  # the reader's stall itself, not a wait for state
    pid_status = open(f"/proc/{p.pid}/status").read()
    rss_kb = int(next(line for line in pid_status.splitlines() if line.startswith("VmRSS")).split()[1])
    rest, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-2000:]
    lines = (first + rest).decode().splitlines()
    assert lines == [f"[0] {i:099d}" for i in range(400_000)]
    # Bounded memory while the reader lags; ASan's shadow memory makes RSS meaningless there.
    assert SANITIZED or rss_kb < 32 * 1024, rss_kb


def test_a_reader_that_goes_away_stops_the_console_not_the_job(sgpu):
    res = subprocess.run(f"'{sgpu.bin}' launch --nproc 2 --no-python sh -c 'seq 100000; echo done >&2' | head -1",
                         shell=True, env=sgpu.env, cwd=sgpu.cwd, capture_output=True, text=True, timeout=60)
    assert res.stdout.startswith("[")
    assert "2 ranks exited 0" in res.stderr, res.stderr


@pytest.mark.parametrize("jobs", [20, 50])
def test_concurrent_jobs_get_distinct_ports_that_a_plain_bind_accepts(sgpu, tmp_path, jobs):
    procs = []
    barrier = socket.socket(socket.AF_UNIX)
    barrier.bind(str(tmp_path / "bound"))
    barrier.listen(jobs)
    barrier.settimeout(240)
    for j in range(jobs):
        out = tmp_path / f"job{j}"
        out.mkdir()
        env = dict(sgpu.env, OUT_DIR=str(out), BARRIER=str(tmp_path / "bound"))
        procs.append((out, sgpu.popen("launch", "--nproc", 2, *no_python(python_program("plain_bind.py")), env=env)))
    # Each job's rank 0 connects once its port is bound, and holds it until
    # every job has: then all let go together (a job that failed is seen below).
    held = []
    try:
        while len(held) < jobs:
            held.append(barrier.accept()[0])
    except TimeoutError:
        pass
    for conn in held:
        conn.close()
    barrier.close()
    ports = []
    for out, p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
        port = (out / "0.txt").read_text()
        assert (out / "1.txt").read_text() == port
        ports.append(int(port))
    assert len(set(ports)) == jobs  # all held at once (the barrier): two alike would be a real clash
    low, high = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    assert all(not low <= port <= high for port in ports)  # never one the kernel hands out on its own


def soft_open_files(limit, hard=None):
    def apply():
        _, h = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard if hard is not None else h))
    return apply


def test_a_thousand_ranks_on_one_node(sgpu):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 7000:
        pytest.skip(f"the hard open-files limit here is {hard}")
    # The usual soft limit of 1024: sgpu raises its own, ranks keep 1024.
    script = 'test "$(ulimit -n)" = 1024'
    p = subprocess.run([sgpu.bin, "launch", "--nproc", "1000", "-o", "json", "--no-python", "sh", "-c", script],
                       env=sgpu.env, cwd=sgpu.cwd, capture_output=True, text=True, timeout=300,
                       preexec_fn=soft_open_files(1024))
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert len(doc["ranks"]) == 1000
    assert all(r["exit_code"] == 0 for r in doc["ranks"])


def test_too_low_a_hard_limit_is_a_clear_error(sgpu):
    p = subprocess.run([sgpu.bin, "launch", "--nproc", "500", "--no-python", "true"], env=sgpu.env, cwd=sgpu.cwd,
                       capture_output=True, text=True, timeout=60, preexec_fn=soft_open_files(256, 256))
    assert p.returncode == 2, p.stderr
    assert "500 ranks on this node need about 2564 open files, but the hard limit (ulimit -Hn) is 256" in p.stderr


def test_ctrl_c_during_a_large_start_acts_at_once(sgpu):
    ranks = 3000
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 6 * ranks + 64:
        pytest.skip(f"the hard open-files limit here is {hard}")
    p = subprocess.Popen([sgpu.bin, "launch", "--nproc", str(ranks), "--no-python", "sh", "-c", "echo up; exec sleep 60"],
                         env=sgpu.env, cwd=sgpu.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().endswith("up\n")  # a rank runs: the start is under way
        start = time.monotonic()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        elapsed = time.monotonic() - start
    finally:
        p.kill()
    assert p.returncode == 130, err[-2000:]
    with open(os.path.join(run_dir(sgpu), "summary.json")) as f:
        doc = json.load(f)
    started = [r for r in doc["ranks"] if r["pid"] is not None]
    assert 0 < len(started) < ranks
    assert elapsed < 10, elapsed
