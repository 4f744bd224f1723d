"""Hostile files and inputs: odd files at the paths sgpu writes, results that
would blow up the summary, secrets on the command line, NULs, out-of-range
durations and `~` in paths; each against the real binary."""
import glob
import json
import os
import pathlib
import pwd
import stat
import subprocess
import sys

import pytest

from conftest import SANITIZED



def run_dirs(home):
    return sorted(glob.glob(os.path.join(home, "runs", "*")))


def only_run_dir(sgpu):
    (path,) = run_dirs(sgpu.env["SGPU_HOME"])
    return path


def failing_job_env(sgpu, error_file):
    return dict(sgpu.env, TORCHELASTIC_ERROR_FILE=str(error_file))


FAIL = ["--nproc", 1, "--no-python", "sh", "-c", "echo broken >&2; exit 3"]


# --- TORCHELASTIC_ERROR_FILE: written where it points, never replaced ------

def test_a_fifo_at_the_error_file_gets_the_document_and_stays_a_fifo(sgpu, tmp_path):
    fifo = tmp_path / "error-fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a launcher above, reading
    try:
        res = sgpu.run("launch", *FAIL, env=failing_job_env(sgpu, fifo), timeout=60)
        assert res.returncode == 3, res.stderr
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"
        doc = json.loads(os.read(reader, 1 << 20))
        assert doc["message"]["errorCode"] == 3
    finally:
        os.close(reader)


def test_a_fifo_nobody_reads_neither_hangs_sgpu_nor_is_replaced(sgpu, tmp_path):
    fifo = tmp_path / "error-fifo"
    os.mkfifo(fifo)
    res = sgpu.run("launch", *FAIL, env=failing_job_env(sgpu, fifo), timeout=60)
    assert res.returncode == 3, res.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced"
    assert f"TORCHELASTIC_ERROR_FILE: cannot write {fifo}" in res.stderr
    assert not os.path.exists(f"{fifo}.tmp")


def test_a_symlink_at_the_error_file_is_written_through(sgpu, tmp_path):
    target = tmp_path / "real-error.json"
    link = tmp_path / "error.json"
    link.symlink_to(target)
    res = sgpu.run("launch", *FAIL, env=failing_job_env(sgpu, link), timeout=60)
    assert res.returncode == 3, res.stderr
    assert os.path.islink(link), "the symlink was replaced"
    doc = json.loads(target.read_text())
    assert doc["message"]["errorCode"] == 3
    assert "broken" in doc["message"]["extraInfo"]["py_callstack"]


def test_a_device_at_the_error_file_stays_a_device(sgpu, tmp_path):
    dev = tmp_path / "null"
    try:
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    except OSError as e:
        pytest.skip(f"cannot make a device node here: {e}")
    res = sgpu.run("launch", *FAIL, env=failing_job_env(sgpu, dev), timeout=60)
    assert res.returncode == 3, res.stderr
    assert stat.S_ISCHR(os.lstat(dev).st_mode), "the device node was replaced by a file"
    assert "TORCHELASTIC_ERROR_FILE" not in res.stderr  # written, nothing to warn about


def test_a_regular_error_file_is_still_replaced_whole(sgpu, tmp_path):
    path = tmp_path / "error.json"
    path.write_text("x" * 100000)  # longer than the document: nothing of it may remain
    res = sgpu.run("launch", *FAIL, env=failing_job_env(sgpu, path), timeout=60)
    assert res.returncode == 3, res.stderr
    assert json.loads(path.read_text())["message"]["errorCode"] == 3


# --- results: once, compact, within a budget --------------------------------

SUMMARY_RESULTS_BUDGET = 32 << 20  # README, "Results"


def zeros_file(tmp_path, size=16_000_000):
    """A `[0,0,...]` JSON array of `size` bytes (under 16 MiB)."""
    path = tmp_path / "zeros.json"
    n = (size - 2 + 1) // 2
    path.write_text("[" + ",".join(["0"] * n) + "]")
    return path


def measured_run(sgpu, *args, timeout=120):
    """sgpu run under a fresh Python whose only child is sgpu: RUSAGE_CHILDREN's
    maxrss is then the largest of sgpu and its ranks (`cp`, `sh`: small)."""
    code = ("import resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:])\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
            "sys.exit(r.returncode)\n")
    res = subprocess.run([sys.executable, "-c", code, sgpu.bin, *map(str, args)], env=sgpu.env, cwd=sgpu.cwd,
                         capture_output=True, text=True, timeout=timeout)
    *rest, maxrss = res.stderr.rstrip("\n").split("\n")
    return res, int(maxrss) * 1024, "\n".join(rest)


@pytest.mark.parametrize("nproc", [1, 4])
def test_a_16_mb_result_keeps_the_summary_and_memory_small(sgpu, tmp_path, nproc):
    zeros = zeros_file(tmp_path)
    res, peak, err = measured_run(sgpu, "launch", "-o", "json", "--nproc", nproc, "--no-python",
                                  "sh", "-c", f'cp {zeros} "$SGPU_RESULT_FILE"')
    assert res.returncode == 0, err
    run_dir = only_run_dir(sgpu)
    size = os.path.getsize(os.path.join(run_dir, "summary.json"))
    # Each result once, on one line; at most the budget over all ranks.
    assert size < min(nproc, 2) * zeros.stat().st_size + (1 << 20), size
    assert len(res.stdout) < min(nproc, 2) * zeros.stat().st_size + (1 << 20)
    # Before: 1 GB for one rank, 3.6 GB for four; ASan's shadow memory and
    # quarantine add a few hundred MiB to any figure.
    limit = (800 if SANITIZED else 200) << 20
    assert peak < limit, f"sgpu's peak RSS was {peak >> 20} MiB"
    doc = json.loads(res.stdout)
    kept = [r for r in doc["results"] if r is not None]
    assert len(kept) == min(nproc, SUMMARY_RESULTS_BUDGET // zeros.stat().st_size)
    assert all(len(r) == (zeros.stat().st_size - 1) // 2 for r in kept)
    assert "result" not in doc["ranks"][0]  # once: results[i], not again in ranks[i]
    for rank, row in enumerate(doc["ranks"]):
        assert row["result_file"] == os.path.join(run_dir, "ranks", str(rank), "result")
        if doc["results"][rank] is None:
            assert any(w.startswith(row["result_file"] + ": ") and "budget" in w for w in doc["warnings"]), doc[
                "warnings"]
    with open(os.path.join(run_dir, "summary.json")) as f:
        assert json.load(f)["results"] == doc["results"]


def test_a_pretty_printed_result_is_stored_compactly(sgpu, tmp_path):
    res = sgpu.run("launch", "-o", "json", "--nproc", 1, "--no-python", "sh", "-c",
                   'printf \'{\\n  "loss": 0.25,\\n  "steps": [\\n    1,\\n    2\\n  ],\\n  "s": "a  b"\\n}\\n\' '
                   '> "$SGPU_RESULT_FILE"', timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["results"] == [{"loss": 0.25, "steps": [1, 2], "s": "a  b"}]
    text = pathlib.Path(only_run_dir(sgpu), "summary.json").read_text()
    assert '"results": [\n    {"loss":0.25,"steps":[1,2],"s":"a  b"}\n  ]' in text


def test_a_symlinked_result_file_is_not_followed(sgpu, tmp_path):
    secret = tmp_path / "not-the-result"
    secret.write_text('{"private": true}')
    res = sgpu.run("launch", "-o", "json", "--nproc", 1, "--no-python", "sh", "-c",
                   f'ln -sf {secret} "$SGPU_RESULT_FILE"', timeout=60)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["results"] == [None]
    assert any("result: it is a symbolic link" in w for w in doc["warnings"]), doc["warnings"]
    assert "private" not in pathlib.Path(only_run_dir(sgpu), "summary.json").read_text()


def test_an_agent_neither_waits_on_a_fifo_result_nor_follows_a_symlinked_one(sgpu, tmp_path):
    from multinode import free_port, make_secret_file, static_node
    endpoint, secret = f"127.0.0.1:{free_port()}", make_secret_file(tmp_path / "secret")
    private = tmp_path / "private"
    private.write_text('"not the result"')
    script = ('rm -f "$SGPU_RESULT_FILE"; case $RANK in 1) mkfifo "$SGPU_RESULT_FILE";; '
              f'2) ln -s {private} "$SGPU_RESULT_FILE";; *) echo \'{{"r": \'$RANK\'}}\' > "$SGPU_RESULT_FILE";; esac')
    job = ["--nproc", 2, "--no-python", "sh", "-c", script]
    n0 = static_node(sgpu, 2, 0, endpoint, secret, "-o", "json", *job)
    n1 = static_node(sgpu, 2, 1, endpoint, secret, *job)
    try:
        out0, err0 = n0.communicate(timeout=60)  # an agent blocked on the FIFO would hold every node
        n1.communicate(timeout=60)
    finally:
        for node in (n0, n1):
            if node.poll() is None:
                node.kill()
                node.communicate()
    assert n0.returncode == 0 and n1.returncode == 0, err0
    assert json.loads(out0)["results"] == [{"r": 0}, None, None, {"r": 3}]


# --- secrets on the command line and in the environment ----------------------

SECRETS = ["tok-A1b2C3", "key-D4e5F6", "pw-G7h8I9", "pat-J1k2L3", "sshpass-M4n5O6", "netrc-P7q8R9", "env-S1t2U3"]


def secret_job(sgpu):
    env = dict(sgpu.env, GITHUB_PAT=SECRETS[3], SSHPASS=SECRETS[4], NETRC=SECRETS[5])
    args = ["--set", f"env.HF_PAT={SECRETS[6]}", "--nproc", 2, "--no-python", "--", "sh", "-c", "exit 0", "job",
            "--token", SECRETS[0], f"--api-key={SECRETS[1]}", "--password", SECRETS[2], "--epochs", "3"]
    return env, args


def test_secret_arguments_and_variables_are_in_no_file_of_the_run(sgpu):
    env, args = secret_job(sgpu)
    res = sgpu.run("launch", "-o", "json", *args, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    for text in (res.stdout, res.stderr):
        for s in SECRETS:
            assert s not in text
    run_dir = only_run_dir(sgpu)
    files = [p for p in pathlib.Path(run_dir).rglob("*") if p.is_file()]
    assert any(p.name == "spec.json" for p in files) and any(p.name == "state.json" for p in files)
    for path in files:
        data = path.read_bytes()
        for s in SECRETS:
            assert s.encode() not in data, f"{s} in {path}"
    spec = json.loads(pathlib.Path(run_dir, "spec.json").read_text())
    assert spec["entrypoint"]["args"][-7:] == ["--token", "****", "--api-key=****", "--password", "****",
                                               "--epochs", "3"]
    # The run list shows the command, masked too.
    runs = sgpu.run("runs", env=env, timeout=30)
    assert "--token '****'" in runs.stdout, runs.stdout
    for s in SECRETS:
        assert s not in runs.stdout


@pytest.mark.parametrize("output", ["text", "json"])
def test_the_dry_run_masks_secret_arguments_and_variables(sgpu, output):
    env, args = secret_job(sgpu)
    res = sgpu.run("launch", "--dry-run", "-o", output, *args, env=env, timeout=30)
    assert res.returncode == 0, res.stderr
    for s in SECRETS:
        assert s not in res.stdout and s not in res.stderr
    assert "GITHUB_PAT" in res.stdout and "--epochs" in res.stdout


# --- NUL in strings ----------------------------------------------------------

def test_a_nul_in_a_toml_env_value_is_refused_naming_the_key(sgpu, tmp_path):
    config = tmp_path / "job.toml"
    config.write_text('[env]\nGOOD = "x"\nBAD = "abc\\u0000xyz"\n')
    res = sgpu.run("launch", "--config", config, "--nproc", 1, "--no-python", "sh", "-c", 'echo "[$BAD]"',
                   timeout=30)
    assert res.returncode == 2, res.stderr
    assert f"{config}:3:7: env.BAD" in res.stderr and "NUL" in res.stderr, res.stderr
    assert "\0" not in res.stderr
    assert not run_dirs(sgpu.env["SGPU_HOME"])


@pytest.mark.parametrize("assignment", ['env.BAD="abc\\u0000xyz"', 'job.args=["a", "b\\u0000c"]',
                                        'output.log_dir="/tmp/x\\u0000y"'])
def test_a_nul_given_with_set_is_refused(sgpu, assignment):
    res = sgpu.run("launch", "--dry-run", "--set", assignment, "--nproc", 1, "--no-python", "true", timeout=30)
    assert res.returncode == 2, res.stderr
    assert "NUL" in res.stderr and assignment.split("=")[0] in res.stderr, res.stderr


# --- durations ----------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--restart-backoff", "10m"], "--restart-backoff 10m: at most 60s"),
    (["--restart-backoff", "61"], "--restart-backoff 61: at most 60s"),
    (["--set", "job.restart_backoff=2m"], "--set job.restart_backoff=2m: at most 60s"),
    (["--timeout", "inf"], "--timeout: invalid duration 'inf'"),
    (["--timeout", "infinity"], "--timeout: invalid duration 'infinity'"),
    (["--timeout", "2h30m30m"], "--timeout: invalid duration '2h30m30m': 'm' is given twice"),
    (["--timeout", "30m2h"], "--timeout: invalid duration '30m2h': units go from the largest to the smallest"),
    (["--timeout", "0.0000000001"], "--timeout: invalid duration '0.0000000001': it is under 1ms"),
    (["--grace", "0.0001s"], "--grace: invalid duration '0.0001s': it is under 1ms"),
])
def test_durations_out_of_range_are_refused(sgpu, args, message):
    for dry in (["--dry-run"], []):
        res = sgpu.run("launch", *dry, *args, "--nproc", 1, "--no-python", "true", timeout=30)
        assert res.returncode == 2, res.stderr
        assert message in res.stderr, res.stderr
    assert not run_dirs(sgpu.env["SGPU_HOME"])


def test_the_backoff_cap_is_accepted_and_a_zero_grace_suggests_no_none(sgpu):
    res = sgpu.run("launch", "--dry-run", "--max-restarts", 1, "--restart-backoff", "60s", "--nproc", 1,
                   "--no-python", "true", timeout=30)
    assert res.returncode == 0, res.stderr
    res = sgpu.run("launch", "--dry-run", "--grace", "0", "--nproc", 1, "--no-python", "true", timeout=30)
    assert res.returncode == 2
    assert "--grace: invalid duration '0'" in res.stderr and "none" not in res.stderr.replace("'none'", ""), \
        res.stderr
    assert "'none'" not in res.stderr, res.stderr
    res = sgpu.run("launch", "--dry-run", "--timeout", "0", "--nproc", 1, "--no-python", "true", timeout=30)
    assert res.returncode == 2 and "'none'" in res.stderr, res.stderr


# --- ~ in paths -------------------------------------------------------------------

def test_tilde_user_in_the_log_dir_is_that_users_home(sgpu, tmp_path):
    me = pwd.getpwuid(os.getuid())
    res = sgpu.run("launch", "--dry-run", "--log-dir", f"~{me.pw_name}/sgpu-runs", "--nproc", 1, "--no-python",
                   "true", timeout=30)
    assert res.returncode == 0, res.stderr
    assert f"run dir   {me.pw_dir.rstrip('/')}/sgpu-runs/<run-id>" in res.stdout, res.stdout
    assert not (tmp_path / "~").exists() and not (tmp_path / f"~{me.pw_name}").exists()


def test_tilde_of_an_unknown_user_is_refused(sgpu, tmp_path):
    res = sgpu.run("launch", "--log-dir", "~no-such-user-sgpu/runs", "--nproc", 1, "--no-python", "true", timeout=30)
    assert res.returncode == 2, res.stderr
    assert "--log-dir ~no-such-user-sgpu/runs: there is no user 'no-such-user-sgpu'" in res.stderr
    assert not list(tmp_path.glob("~*"))


def test_tilde_in_sgpu_home_is_home(sgpu, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = dict(sgpu.env, HOME=str(home), SGPU_HOME="~/sgpu")
    res = sgpu.run("launch", "--nproc", 1, "--no-python", "true", env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    (run,) = run_dirs(str(home / "sgpu"))
    assert not (tmp_path / "~").exists()
    listed = sgpu.run("runs", env=env, timeout=30)  # finds it there too
    assert listed.returncode == 0 and os.path.basename(run) in listed.stdout, listed.stdout + listed.stderr
