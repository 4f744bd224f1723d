"""sgpu launch on one node: environment, exit codes, teardown, signals."""
import contextlib
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import time

import pytest

from conftest import ROOT, SANITIZED, TORCH_PYTHON, pid_alive, python_program, assert_one_exit_code, wait_for_files

TORCHRUN_VARS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
                 "GROUP_WORLD_SIZE", "NNODES", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                 "TORCHELASTIC_ERROR_FILE", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "OMP_NUM_THREADS",
                 "CUDA_DEVICE_ORDER", "SGPU_RUN_ID", "SGPU_GPU_TYPE", "SGPU_RESULT_FILE"]


def read_envs(out_dir, n):
    return [json.loads((out_dir / f"env-{r}.json").read_text()) for r in range(n)]


def test_every_rank_gets_the_torchrun_environment(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out), MY_VAR="kept")
    res = sgpu.run("launch", "--nproc", 4, python_program("dump_env.py"), env=env)
    assert res.returncode == 0, res.stderr
    envs = read_envs(out, 4)
    port = envs[0]["MASTER_PORT"]
    run_id = envs[0]["SGPU_RUN_ID"]
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", run_id)
    for r, e in enumerate(envs):
        for var in TORCHRUN_VARS:
            assert var in e, f"rank {r} lacks {var}"
        assert e["RANK"] == str(r) and e["LOCAL_RANK"] == str(r) and e["ROLE_RANK"] == str(r)
        assert e["WORLD_SIZE"] == "4" and e["LOCAL_WORLD_SIZE"] == "4" and e["ROLE_WORLD_SIZE"] == "4"
        assert e["GROUP_RANK"] == e["NODE_RANK"] == "0"
        assert e["GROUP_WORLD_SIZE"] == e["NNODES"] == "1"
        assert e["ROLE_NAME"] == "default"
        assert e["MASTER_ADDR"] == "127.0.0.1" and e["MASTER_PORT"] == port and 0 < int(port) < 65536
        assert e["TORCHELASTIC_RUN_ID"] == e["SGPU_RUN_ID"] == run_id
        assert e["TORCHELASTIC_RESTART_COUNT"] == "0" and e["TORCHELASTIC_MAX_RESTARTS"] == "0"
        assert e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1" and e["OMP_NUM_THREADS"] == "1"
        assert e["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert e["SGPU_GPU_TYPE"] == ""
        run_dir = sgpu.env["SGPU_HOME"] + f"/runs/{run_id}/ranks/{r}"
        assert e["TORCHELASTIC_ERROR_FILE"] == f"{run_dir}/error.json"
        assert e["SGPU_RESULT_FILE"] == f"{run_dir}/result"
        assert os.path.isdir(run_dir)
        assert e["MY_VAR"] == "kept"  # the caller's environment is inherited
        assert "CUDA_VISIBLE_DEVICES" not in e
    # OMP_NUM_THREADS is said once, not per rank.
    assert res.stderr.count("OMP_NUM_THREADS=1") == 1


def test_user_settings_win_over_tuning_defaults(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out), OMP_NUM_THREADS="7", TORCH_NCCL_ASYNC_ERROR_HANDLING="0")
    res = sgpu.run("launch", "--nproc", 2, python_program("dump_env.py"), env=env)
    assert res.returncode == 0, res.stderr
    for e in read_envs(out, 2):
        assert e["OMP_NUM_THREADS"] == "7" and e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "0"
    assert "OMP_NUM_THREADS=1" not in res.stderr


def final_loss(text):
    m = re.findall(r"final loss (\d+\.\d+)", text)
    assert m, text
    return m[-1]


def test_ddp_example_matches_the_same_script_started_by_hand(sgpu, tmp_path):
    script = str(ROOT / "examples" / "ddp_mlp.py")
    res = sgpu.run("launch", "--nproc", 4, script, "--epochs", 2, timeout=300)
    assert res.returncode == 0, res.stderr
    assert re.search(r"^\[0\] final loss ", res.stdout, re.M)
    via_sgpu = final_loss(res.stdout)

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(4):
        env = dict(sgpu.env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="4", LOCAL_WORLD_SIZE="4",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([TORCH_PYTHON, "-u", script, "--epochs", "2"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert final_loss(outs[0][0]) == via_sgpu


@pytest.mark.parametrize("command,code", [
    ("exit 0", 0),
    ("exit 1", 1),
    ("exit 3", 3),
    ("exit 255", 255),
    ("kill -SEGV $$", 128 + signal.SIGSEGV),
    ("kill -KILL $$", 128 + signal.SIGKILL),
])
def test_exit_code_is_the_failing_ranks_own(sgpu, command, code):
    # Only rank 1 fails; the others succeed at once.
    script = f'if [ "$RANK" = 1 ]; then {command}; fi; exit 0'
    res = sgpu.run("launch", "-o", "json", "--nproc", 3, "--no-python", "sh", "-c", script)
    assert res.returncode == code, res.stderr
    assert_one_exit_code(res.returncode, home=sgpu.env, stdout=res.stdout)
    if code:
        assert "rank 1 failed first" in res.stderr


def test_entrypoint_not_found_is_127_with_a_sentence(sgpu):
    res = sgpu.run("launch", "--nproc", 2, "missing_script.py")
    assert res.returncode == 127
    assert "sgpu: error: script 'missing_script.py': no such file" in res.stderr
    res = sgpu.run("launch", "-o", "json", "--nproc", 2, "--no-python", "no-such-program-xyz")
    assert res.returncode == 127
    assert_one_exit_code(127, stdout=res.stdout)
    assert "executable 'no-such-program-xyz' not found on PATH" in res.stderr
    res = sgpu.run("launch", "--nproc", 1, "--python", "/nonexistent/python", "x.py")
    assert res.returncode == 127
    assert "Python interpreter '/nonexistent/python': no such file" in res.stderr


def test_entrypoint_not_executable_is_126(sgpu, tmp_path):
    prog = tmp_path / "prog.sh"
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o644)
    res = sgpu.run("launch", "--nproc", 2, "--no-python", str(prog))
    assert res.returncode == 126
    assert "is not an executable file" in res.stderr


def test_timeout_tears_down_and_exits_124(sgpu):
    t0 = time.monotonic()
    res = sgpu.run("launch", "-o", "json", "--nproc", 2, "--timeout", "1s", "--no-python", "sleep", "30")
    assert res.returncode == 124, res.stderr
    assert_one_exit_code(124, home=sgpu.env, stdout=res.stdout)
    assert time.monotonic() - t0 < 10
    assert "timed out after 1s" in res.stderr


def write_pid_and(cmd):
    return f'echo $$ > "$OUT_DIR/pid-$RANK"; {cmd}'


def read_pids(out, n, timeout=60):
    """The pids the first n ranks wrote, once all wrote theirs (or those written by the deadline)."""
    deadline = time.monotonic() + timeout
    pids = []
    for r in range(n):
        p = out / f"pid-{r}"
        while not (p.exists() and p.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.02)
        if p.exists() and p.read_text().strip():
            pids.append(int(p.read_text()))
    return pids


def test_first_failure_tears_down_the_others_at_once(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    # Timed from rank 2's failure, not from sgpu's start: a loaded machine
    # (the ASan binary beside other tests) may take a second to start.
    script = write_pid_and('if [ "$RANK" = 2 ]; then sleep 0.5; touch "$OUT_DIR/failing"; exit 7; fi; exec sleep 60')
    res = sgpu.run("launch", "--nproc", 4, "--no-python", "sh", "-c", script, env=env)
    elapsed = time.time() - (out / "failing").stat().st_mtime
    assert res.returncode == 7, res.stderr
    assert elapsed < 1.0, f"teardown took {elapsed:.2f}s after rank 2 failed"
    for pid in read_pids(out, 4):
        assert not pid_alive(pid)
    assert "rank 2 failed first: exit 7; 3 other ranks stopped by sgpu" in res.stderr


@pytest.mark.alone  # a teardown bound of seconds: 6.1 s once beside a worker, the portable build and clang-tidy
def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    # Timed from rank 0's failure, not from sgpu's start, which a loaded
    # machine can delay by seconds (the ASan binary beside a cold build).
    # Rank 0 fails once rank 1 ignores SIGTERM.
    script = write_pid_and(
        'if [ "$RANK" = 0 ]; then until [ -e "$OUT_DIR/trapped" ]; do sleep 0.05; done; touch "$OUT_DIR/failing"; exit 5; fi; '
        'trap "" TERM; touch "$OUT_DIR/trapped"; sleep 60 & wait; sleep 60'
    )
    res = sgpu.run("launch", "--nproc", 2, "--grace", "1s", "--no-python", "sh", "-c", script, env=env)
    elapsed = time.time() - (out / "failing").stat().st_mtime
    assert res.returncode == 5, res.stderr
    # The grace, then SIGKILL: not before it, and not much after (the ASan
    # binary's teardown and exit beside a busy second worker took 2.9 s once).
    assert 0.95 <= elapsed < 4.0, f"rank 1 was killed {elapsed:.2f}s after rank 0 failed (grace 1s)"
    for pid in read_pids(out, 2):
        assert not pid_alive(pid)



@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signals_to_sgpu_reach_every_rank(sgpu, tmp_path, sig, code):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out), MODE="exit")
    p = sgpu.popen("launch", "--nproc", 3, "--python", TORCH_PYTHON, python_program("signals.py"), env=env)
    wait_for_files(out, "ready-*", 3)
    p.send_signal(sig)
    _, err = p.communicate(timeout=30)
    assert p.returncode == code, err
    assert_one_exit_code(code, home=sgpu.env)
    for r in range(3):
        assert (out / f"sig-{r}.txt").read_text().split() == [signal.Signals(sig).name]
    # A SIGTERM from the system is a preemption (README "Stopping well"); the exit code is the same.
    expected = "preempted" if sig == signal.SIGTERM else f"interrupted by {signal.Signals(sig).name}"
    assert expected in err


def test_second_ctrl_c_kills_at_once(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out), MODE="ignore")
    p = sgpu.popen("launch", "--nproc", 2, "--grace", "60s", "--python", TORCH_PYTHON,
                   python_program("signals.py"), env=env)
    wait_for_files(out, "ready-*", 2)
    p.send_signal(signal.SIGINT)
    wait_for_files(out, "sig-*", 2)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=30)
    assert time.monotonic() - t0 < 2
    assert p.returncode == 130
    for r in range(2):
        assert not pid_alive(int((out / f"pid-{r}.txt").read_text()))


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGUSR2])
def test_sigusr_is_forwarded_as_it_is(sgpu, tmp_path, sig):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out), MODE="exit")
    p = sgpu.popen("launch", "--nproc", 2, "--python", TORCH_PYTHON, python_program("signals.py"), env=env)
    wait_for_files(out, "ready-*", 2)
    p.send_signal(sig)
    wait_for_files(out, "sig-*", 2)
    for r in range(2):
        assert (out / f"sig-{r}.txt").read_text().split() == [signal.Signals(sig).name]
    assert p.poll() is None  # the job goes on
    p.send_signal(signal.SIGTERM)
    p.communicate(timeout=30)


def test_kill_9_of_sgpu_leaves_no_rank_running(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    p = sgpu.popen("launch", "--nproc", 4, "--no-python", "sh", "-c", write_pid_and("exec sleep 60"), env=env)
    pids = read_pids(out, 4)
    assert len(pids) == 4
    p.kill()
    p.wait()
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(pid_alive(x) for x in pids):
        time.sleep(0.02)
    assert not any(pid_alive(x) for x in pids)


@contextlib.contextmanager
def ranks_sleeping_beside_the_guard(sgpu, tmp_path, n):
    """sgpu running n ranks that sleep: (its Popen, the ranks' pids, its orphan guard's pid); sgpu is killed after."""
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    p = sgpu.popen("launch", "--nproc", n, "--no-python", "sh", "-c", write_pid_and("exec sleep 60"), env=env)
    try:
        ranks = read_pids(out, n)
        children = [int(c) for c in open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()]
        guards = [c for c in children if c not in ranks]
        assert len(guards) == 1, (children, ranks)
        yield p, ranks, guards[0]
    finally:
        p.kill()
        p.wait()


def proc_status(pid):
    """/proc/PID/status as {field: value}, the value stripped ("6848 kB")."""
    return {k: v.strip() for k, v in (line.split(":", 1) for line in open(f"/proc/{pid}/status"))}


def peak_rss_kib(pid):
    return int(proc_status(pid)["VmHWM"].split()[0])


def test_the_orphan_guard_is_a_few_pages_holding_only_its_pipe(sgpu, tmp_path):
    # The guard waits beside every run: its own freestanding program, not a
    # copy of sgpu (2.3 MiB of peak RSS when it was a fork).
    with ranks_sleeping_beside_the_guard(sgpu, tmp_path, 2) as (_, ranks, guard):
        assert open(f"/proc/{guard}/comm").read().strip() == "sgpu-guard"
        assert peak_rss_kib(guard) < 256
        assert sorted(int(fd) for fd in os.listdir(f"/proc/{guard}/fd")) == [0, 1, 2]
        assert os.readlink(f"/proc/{guard}/fd/1") == "/dev/null"
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(pid_alive(x) for x in ranks):
        time.sleep(0.02)
    assert not any(pid_alive(x) for x in ranks)


@pytest.mark.skipif(SANITIZED, reason="ASan's shadow memory makes RSS meaningless; scripts/test runs this on the "
                    "portable release binary")
def test_a_launch_of_8_ranks_holds_under_6_4_mib_at_its_peak(sgpu, tmp_path):
    # sgpu and its guard together, at their peak so far, once all 8 ranks
    # run: issue 36's bound. The binary's text is 8 MiB and the kernel maps
    # 64 KiB of it around each page a process touches, so the launch's own
    # functions are linked together at its front (packaging/hot_text/):
    # scattered, they cost 3.9 MiB of it and the launch 8.1-8.5 MB. The
    # portable binary's relocation table (705 KiB unpacked: glibc 2.28 has no
    # DT_RELR) is given back as main starts (startup.cpp), and it loads no
    # libm (330 KiB: glibc_compat.cpp, format_duration).
    # Which parts of the file those 64 KiB windows take in depends on where
    # the kernel put the binary: 12 launches of the portable binary held 5.0
    # to 5.8 MiB, median 5.63 (with libm: 30 launches, 5.4 to 6.3, median
    # 6.06), and exactly the same figure every run with address
    # randomization off (setarch -R). So the bound is on the median of five
    # launches, as the benchmark reports its figure, with 0.4 MiB over the
    # aim for that spread: in a clean clone's scripts/test, right after the
    # portable build, the median with libm was 6.55 MiB (6136-6752 KiB), the
    # same binary's 6.0 a minute later (the developer build's median: 6.28). A
    # binary written seconds before mapped more still, 6.8-7.0 MiB in all
    # five, until the file was on disk: the test writes it out first, as any
    # installed binary is.
    os.sync()
    peaks = []
    for i in range(5):
        run = tmp_path / str(i)
        run.mkdir()
        with ranks_sleeping_beside_the_guard(sgpu, run, 8) as (p, _, guard):
            peaks.append(peak_rss_kib(p.pid) + peak_rss_kib(guard))
    assert statistics.median(peaks) < 6.4 * 1024, sorted(peaks)


def test_sgpu_grows_its_descriptor_table_for_every_rank_before_they_start(sgpu, tmp_path):
    # Ranks share sgpu's descriptor table from their clone until their first
    # call; a table grown under them waits for the kernel's RCU (milliseconds
    # a launch). So sgpu grows it first, to what its ranks will need: 64 and 5
    # per rank (open_files_needed), and 64 more; 8 ranks alone use under 80.
    # A child's table is sized by its parent's open descriptors, and pytest
    # holds many: sgpu is started by a shell holding three, so its table
    # starts at the kernel's 64.
    out = tmp_path / "out"
    out.mkdir()
    shell = subprocess.Popen(["sh", "-c", '"$@" >/dev/null 2>&1 & echo $!; wait', "sh", sgpu.bin, "launch", "--nproc",
                              "8", "--no-python", "sh", "-c", write_pid_and("exec sleep 60")],
                             env=dict(sgpu.env, OUT_DIR=str(out)), cwd=sgpu.cwd, stdout=subprocess.PIPE, text=True)
    pid = int(shell.stdout.readline())
    try:
        assert len(read_pids(out, 8)) == 8
        fd_size = int(proc_status(pid)["FDSize"])
        assert fd_size >= 64 + 5 * 8 + 64, fd_size
    finally:
        os.kill(pid, signal.SIGKILL)
        shell.wait()


def test_no_child_shares_the_descriptor_table_while_sgpu_grows_it(sgpu, tmp_path):
    # The orphan guard and the ranks start with clone(CLONE_VM | CLONE_FILES)
    # and share sgpu's descriptor table until their first call; a shared table
    # grows only after an RCU grace period, which on a busy host cost launches
    # 6-15 ms each when the guard started before the growth. So the growth
    # (fcntl(0, F_DUPFD_CLOEXEC, N) at the top of the table) comes before sgpu's
    # first clone that shares its table.
    log = tmp_path / "strace.log"
    env = dict(sgpu.env)  # LeakSanitizer cannot run under ptrace
    env["ASAN_OPTIONS"] = ":".join(x for x in (env.get("ASAN_OPTIONS", ""), "detect_leaks=0") if x)
    res = subprocess.run(["strace", "-f", "-qq", "-e", "trace=clone,clone3,fcntl", "-o", str(log), sgpu.bin, "launch",
                          "--nproc", "8", "--no-python", "true"], env=env, cwd=sgpu.cwd, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = log.read_text().splitlines()
    main = lines[0].split()[0]
    calls = [line.split(None, 1)[1] for line in lines if line.split()[0] == main]
    growth = [i for i, c in enumerate(calls) if re.match(r"fcntl\(0, F_DUPFD_CLOEXEC, (\d+)\)", c)
              and int(re.match(r"fcntl\(0, F_DUPFD_CLOEXEC, (\d+)\)", c).group(1)) >= 64 + 5 * 8 + 64 - 1]
    sharing = [i for i, c in enumerate(calls) if c.startswith("clone(") and "CLONE_FILES" in c]
    assert growth and len(sharing) >= 9, calls  # the guard and 8 ranks
    assert growth[0] < sharing[0], [calls[i] for i in (growth[0], sharing[0])]


def test_twenty_concurrent_jobs_get_distinct_working_master_ports(sgpu, tmp_path):
    jobs = []
    for j in range(20):
        out = tmp_path / f"job{j}"
        out.mkdir()
        env = dict(sgpu.env, OUT_DIR=str(out))
        jobs.append((out, sgpu.popen("launch", "--nproc", 2, python_program("store_job.py"), env=env)))
    ports = []
    for out, p in jobs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        lines = [(out / f"{r}.txt").read_text().split() for r in range(2)]
        assert lines[0] == lines[1]
        assert lines[0][1] == "3"  # the all_reduce really ran: 1 + 2
        ports.append(lines[0][0])
    assert len(set(ports)) == 20


def test_torchrun_spellings_are_accepted(sgpu):
    res = sgpu.run("launch", "--standalone", "--nnodes=1", "--nproc_per_node=2", "--max_restarts=0",
                   "--no_python", "sh", "-c", "echo rank $RANK")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["[0] rank 0", "[1] rank 1"]


@pytest.mark.parametrize("flag,message", [
    ("--rdzv-backend=c10d", "torchrun's --rdzv-backend is not supported by sgpu"),
    ("--tee=3", "torchrun's --tee is not supported by sgpu"),
    ("--max-restarts=-1", "must be between 0 and 1000000"),
    ("--nnodes=2", "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    ("--bogus", "unknown option '--bogus'"),
])
def test_unsupported_options_are_clear_errors(sgpu, flag, message):
    res = sgpu.run("launch", "--nproc", 1, flag, "train.py")
    assert res.returncode == 2
    assert message in res.stderr


def test_arguments_after_the_entrypoint_reach_the_job_untouched(sgpu):
    hostile = ["--nproc", "9", "-m", "--", "a b", "$(touch x)", "'q'", ""]
    res = sgpu.run("launch", "--nproc", 1, "--no-python", TORCH_PYTHON, "-c",
                   "import sys, json; print(json.dumps(sys.argv[1:]))", *hostile)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.removeprefix("[0] ")) == hostile
    res = sgpu.run("launch", "--nproc", 1, "--no-python", "--", "echo", "--gpus", "3")
    assert res.stdout == "[0] --gpus 3\n"


def test_module_entrypoint(sgpu, tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "hello.py").write_text("import os, sys\nprint('module', os.environ['RANK'], sys.argv[1:])\n")
    res = sgpu.run("launch", "--nproc", 2, "-m", "mypkg.hello", "x")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["[0] module 0 ['x']", "[1] module 1 ['x']"]


def test_bad_flag_values_are_clear_errors(sgpu):
    cases = [
        (["--nproc", 2, "--gpus", 2], "--gpus and --nproc exclude each other"),
        (["--nproc", 0], "--nproc 0: must be between 1 and 4096"),
        (["--nproc", "two"], "--nproc two: expected a number of ranks, or gpu, auto, cpu"),
        (["--nproc", 1, "--timeout", "5x"], "--timeout: invalid duration '5x'"),
        (["--nproc", 1, "--gpu-type", "H100"], "--gpu-type H100 needs --gpus N"),
        (["--gpus", 1], "--gpus 1: this node has no visible GPUs"),
    ]
    for args, message in cases:
        res = sgpu.run("launch", *args, "--no-python", "true")
        assert res.returncode == 2, (args, res.stderr)
        assert message in res.stderr, (args, res.stderr)


def test_a_taken_master_port_is_a_clear_error(sgpu):
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        res = sgpu.run("launch", "--nproc", 1, "--master-port", s.getsockname()[1], "--no-python", "true")
    assert res.returncode == 2
    assert "the port is in use on this node" in res.stderr


def test_fake_gpus_drive_selection_and_visibility(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out), SGPU_FAKE_GPUS="8xH100")
    res = sgpu.run("launch", "--gpus", 4, "--gpu-type", "h100", python_program("dump_env.py"), env=env)
    assert res.returncode == 0, res.stderr
    for r, e in enumerate(read_envs(out, 4)):
        assert e["CUDA_VISIBLE_DEVICES"] == "0,1,2,3" and e["LOCAL_RANK"] == str(r)
        assert e["SGPU_GPU_TYPE"] == "H100"
    # An incoming CUDA_VISIBLE_DEVICES is the pool; per-rank binding gives each rank its own GPU.
    env["CUDA_VISIBLE_DEVICES"] = "6,2,5"
    res = sgpu.run("launch", "--gpus", 3, "--gpu-bind", "per-rank", python_program("dump_env.py"), env=env)
    assert res.returncode == 0, res.stderr
    assert [e["CUDA_VISIBLE_DEVICES"] for e in read_envs(out, 3)] == ["6", "2", "5"]
    res = sgpu.run("launch", "--gpus", 4, python_program("dump_env.py"), env=env)
    assert res.returncode == 2 and "only 3 visible H100 GPUs" in res.stderr
    res = sgpu.run("launch", "--gpus", 2, "--gpu-type", "A100", python_program("dump_env.py"), env=env)
    assert res.returncode == 2 and "this node has 3x H100" in res.stderr


def test_include_and_exclude_choose_this_node_s_gpus(sgpu, tmp_path):
    """DeepSpeed's filters on one node (':3', 'localhost:1,2'): the plan, CUDA_VISIBLE_DEVICES and --dry-run skip
    what they leave out; a filter that names another host, a GPU the node lacks, or leaves none is an error."""
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out), SGPU_FAKE_GPUS="4xH100")
    res = sgpu.run("launch", "--exclude", ":3", "--gpus", 3, python_program("dump_env.py"), env=env)
    assert res.returncode == 0, res.stderr
    assert [e["CUDA_VISIBLE_DEVICES"] for e in read_envs(out, 3)] == ["0,1,2"] * 3
    res = sgpu.run("launch", "--include", "localhost:1,2", "--gpu-bind", "per-rank", python_program("dump_env.py"),
                   env=env)
    assert res.returncode == 0, res.stderr
    assert sorted(e["CUDA_VISIBLE_DEVICES"] for e in read_envs(out, 2)) == ["1", "2"]
    plan = json.loads(sgpu.run("launch", "--dry-run", "-o", "json", "--exclude", ":0", "--no-python", "true",
                               env=env).stdout)
    assert plan["notes"] == ["GPU 0 left out by --exclude"] and plan["nodes"][0]["ranks"] == [0, 1, 2]
    errors = [
        (["--exclude", ":3", "--gpus", 4], "this node has only 3 visible H100 GPUs (3x H100); GPU 3 left out by "
                                           "--exclude"),
        (["--exclude", "gpu-b:1", "--gpus", 2], "--exclude gpu-b:1: the local backend runs on this host"),
        (["--exclude", ":9", "--gpus", 2], "--exclude :9: this node has no GPU 9 (it has 0, 1, 2, 3)"),
        (["--include", ":1", "--exclude", ":1"], "--include :1 --exclude :1: they leave none of this node's GPUs"),
        (["--exclude", ":1,"], "--exclude ':1,': trailing ','"),
    ]
    for args, message in errors:
        res = sgpu.run("launch", *args, "--no-python", "true", env=env)
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)
    res = sgpu.run("launch", "--exclude", ":3", "--nproc", 1, "--no-python", "true", env=env)
    assert res.returncode == 0 and "--include/--exclude are not used" in res.stderr, res.stderr


def test_a_filter_without_a_host_is_refused_by_the_multi_node_backends(sgpu):
    res = sgpu.run("launch", "--backend", "ssh", "--hosts", "a:2,b:2", "--exclude", ":1", "--gpus", 2, "--dry-run",
                   "--no-python", "true")
    assert res.returncode == 2 and "--exclude ':1': which host?" in res.stderr, res.stderr
    res = sgpu.run("launch", "--backend", "slurm", "--exclude", ":3", "--nproc", 1, "--no-python", "true")
    assert res.returncode == 2 and "--exclude :3: which node?" in res.stderr, res.stderr


def test_kill_9_of_sgpu_also_kills_what_ranks_started(sgpu, tmp_path):
    # PR_SET_PDEATHSIG reaches only the rank's own process; its children
    # (here a background sleep, like a data loader worker) must die too.
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    script = 'sleep 60 & echo $! > "$OUT_DIR/child-$RANK"; echo $$ > "$OUT_DIR/pid-$RANK"; wait'
    p = sgpu.popen("launch", "--nproc", 2, "--no-python", "sh", "-c", script, env=env)
    pids = read_pids(out, 2)
    children = [int((out / f"child-{r}").read_text()) for r in range(2)]
    assert all(pid_alive(x) for x in children)
    p.kill()
    p.wait()
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and any(pid_alive(x) for x in pids + children):
        time.sleep(0.02)
    assert not any(pid_alive(x) for x in pids + children)
