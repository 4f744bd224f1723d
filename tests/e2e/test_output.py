"""What a run tells its user: console lines, log files, events, the root-cause
report, results and -o json, driving the real binary."""
import glob
import importlib.util
import json
import os
import re
import subprocess
import time

import pytest

from conftest import PROGRAMS, TORCH_PYTHON, python_program


def load_program(name):
    spec = importlib.util.spec_from_file_location(name, PROGRAMS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


interleave = load_program("interleave")
lossless = load_program("lossless")


def run_dir(sgpu):
    (path,) = glob.glob(os.path.join(sgpu.env["SGPU_HOME"], "runs", "*"))
    return path


def log(sgpu, rank, stream):
    with open(os.path.join(run_dir(sgpu), "ranks", str(rank), stream), "rb") as f:
        return f.read()


def run_bytes(sgpu, *args, env=None, timeout=120, console="pipes"):
    """sgpu's run, stdout and stderr as bytes: read from pipes, or with
    console="files" from regular files (whose lines sgpu makes on its file
    thread instead of the loop's)."""
    argv = [sgpu.bin, *map(str, args)]
    if console == "pipes":
        return subprocess.run(argv, env=env or sgpu.env, cwd=sgpu.cwd, capture_output=True, timeout=timeout)
    out, err = os.path.join(sgpu.cwd, "console.out"), os.path.join(sgpu.cwd, "console.err")
    with open(out, "wb") as o, open(err, "wb") as e:
        res = subprocess.run(argv, env=env or sgpu.env, cwd=sgpu.cwd, stdout=o, stderr=e, timeout=timeout)
    with open(out, "rb") as o, open(err, "rb") as e:
        return subprocess.CompletedProcess(argv, res.returncode, o.read(), e.read())


def console_segments(data):
    """Splits prefixed console bytes into (rank, body) segments: a segment is
    "[r] " then bytes up to "\\n", "\\r\\n" or a lone "\\r"."""
    out = []
    pos = 0
    while pos < len(data):
        m = re.compile(rb"\[(\d+)\] ").match(data, pos)
        assert m, f"a segment without a rank prefix at byte {pos}: {data[pos:pos + 80]!r}"
        i = m.end()
        while True:
            nl, cr = data.find(b"\n", i), data.find(b"\r", i)
            if cr != -1 and (nl == -1 or cr < nl):
                end = cr + 2 if data[cr + 1:cr + 2] == b"\n" else cr + 1
            else:
                assert nl != -1, f"an unterminated segment at byte {pos}"
                end = nl + 1
            break
        out.append((int(m.group(1)), data[m.end():end]))
        pos = end
    return out


def per_rank(segments, n):
    joined = [b""] * n
    for rank, body in segments:
        joined[rank] += body
    return joined


def no_python(*program):
    # Python without site packages starts fast: these programs need no torch.
    return ["--no-python", TORCH_PYTHON, "-S", "-u", *program]


def test_eight_ranks_lines_are_never_torn(sgpu):
    lines = 400
    env = dict(sgpu.env, OMP_NUM_THREADS="1")  # no note from sgpu before the job's lines on stderr
    res = run_bytes(sgpu, "launch", "--nproc", 8, *no_python(python_program("interleave.py"), lines), env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    for data, stream in ((res.stdout, "o"), (res.stderr, "e")):
        got = {r: [] for r in range(8)}
        for rank, body in console_segments(data.split(b"sgpu: ", 1)[0] if stream == "e" else data):
            got[rank].append(body)
        for r in range(8):
            # Every line whole, under its own rank's prefix, in the order written.
            assert got[r] == [interleave.line(r, stream, i) for i in range(lines)], f"rank {r} {stream}"
    for r in range(8):
        assert log(sgpu, r, "stdout") == b"".join(interleave.line(r, "o", i) for i in range(lines))
        assert log(sgpu, r, "stderr") == b"".join(interleave.line(r, "e", i) for i in range(lines))


def test_random_bytes_reach_logs_and_console_without_loss(sgpu):
    size = 1_500_000
    res = run_bytes(sgpu, "launch", "--nproc", 4, *no_python(python_program("lossless.py"), size))
    assert res.returncode == 0, res.stderr[-2000:]
    stdout = per_rank(console_segments(res.stdout), 4)
    for r in range(4):
        want_out, want_err = lossless.data(r, "o", size), lossless.data(r, "e", size)
        assert log(sgpu, r, "stdout") == want_out
        assert log(sgpu, r, "stderr") == want_err
        # The console adds only prefixes, and a newline after the last line, which had none.
        assert stdout[r] == want_out + b"\n"


@pytest.mark.parametrize("one_file", [False, True], ids=["separate files", "one file, as 2>&1"])
def test_a_console_that_is_a_file_gets_every_line_whole_and_in_order(sgpu, tmp_path, one_file):
    """A regular file is written on a thread of its own (a slow disk must not
    hold up the loop): nothing lost, nothing torn, each rank's lines in order,
    and sgpu's own last line after every rank's."""
    lines = 300
    env = dict(sgpu.env, OMP_NUM_THREADS="1")  # no note from sgpu before the job's lines
    out_path, err_path = tmp_path / "out", tmp_path / "err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        res = subprocess.run([sgpu.bin, "launch", "--nproc", "4", *no_python(python_program("interleave.py"), str(lines))],
                             env=env, cwd=sgpu.cwd, stdout=out, stderr=subprocess.STDOUT if one_file else err,
                             timeout=120)
    streams = {"o": out_path.read_bytes(), "e": err_path.read_bytes()}
    assert res.returncode == 0, streams["e"][-2000:] + streams["o"][-2000:]
    jobs, last = streams["o" if one_file else "e"].split(b"sgpu: ", 1)
    assert last.startswith(b"4 ranks exited 0") and last.count(b"\n") == 1, last
    if one_file:
        segments = console_segments(jobs)
    else:
        segments = console_segments(streams["o"]) + console_segments(jobs)
    for r in range(4):
        got = [body for rank, body in segments if rank == r]
        for stream in "oe":
            want = [interleave.line(r, stream, i) for i in range(lines)]
            wanted = set(want)
            assert [b for b in got if b in wanted] == want, f"rank {r} {stream}"
        assert len(got) == 2 * lines, f"rank {r}: {len(got)} segments"

    size = 1_500_000
    with open(out_path, "wb") as out:
        res = subprocess.run([sgpu.bin, "launch", "--nproc", "4", *no_python(python_program("lossless.py"), str(size))],
                             env=env, cwd=sgpu.cwd, stdout=out, stderr=subprocess.PIPE, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    stdout = per_rank(console_segments(out_path.read_bytes()), 4)
    for r in range(4):
        assert stdout[r] == lossless.data(r, "o", size) + b"\n", f"rank {r}"


def test_raw_passes_one_ranks_bytes_untouched(sgpu):
    size = 300_000
    env = dict(sgpu.env, OMP_NUM_THREADS="1")
    res = run_bytes(sgpu, "launch", "--nproc", 3, "--raw", "--ranks", 1,
                    *no_python(python_program("lossless.py"), size), env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == lossless.data(1, "o", size)
    assert res.stderr.split(b"sgpu: 3 ranks exited 0")[0] == lossless.data(1, "e", size)
    assert log(sgpu, 0, "stdout") == lossless.data(0, "o", size)  # the others are still logged


def test_logs_keep_every_byte_when_the_timeout_kills_ranks_mid_stream(sgpu, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    env = dict(sgpu.env, OUT_DIR=str(out))
    res = run_bytes(sgpu, "launch", "--nproc", 4, "--timeout", "2s", "-o", "json",
                    *no_python(python_program("lossless.py"), 400_000, "forever"), env=env)
    assert res.returncode == 124, res.stderr[-2000:]
    doc = json.loads(res.stdout)
    assert doc["timed_out"] is True and doc["exit_code"] == 124 and doc["status"] == "timed_out"
    assert [r["verdict"] for r in doc["ranks"]] == ["terminated_by_sgpu"] * 4
    assert [r["signal"] for r in doc["ranks"]] == ["SIGTERM"] * 4
    for r in range(4):
        for stream, name in (("stdout", "o"), ("stderr", "e")):
            blob = lossless.data(r, name, 400_000)
            got = log(sgpu, r, stream)
            counted = int((out / f"count-{r}-{name}").read_text())
            # Everything the rank got into the pipe is in the log: at least what
            # it counted, at most one more write (killed before counting it).
            assert counted > 0
            assert counted <= len(got) <= counted + 20_000, (r, stream, counted, len(got))
            assert got == (blob * (len(got) // len(blob) + 1))[:len(got)], (r, stream)


@pytest.mark.parametrize("console", ["pipes", "files"])
def test_long_lines_progress_bars_partial_lines_and_bytes_that_are_not_utf8(sgpu, console):
    program = (
        "import os, sys\n"
        "w = os.write\n"
        "w(1, b'x' * 300000 + b'\\n')\n"
        "w(1, b'10%\\r'); w(1, b'20%\\r'); w(1, b'100%\\n')\n"
        "w(2, b'caf\\xc3\\xa9 \\xff\\xfe bytes\\n')\n"
        "w(1, b'no newline at exit')\n")
    res = run_bytes(sgpu, "launch", "--nproc", 1, "--no-python", TORCH_PYTHON, "-S", "-c", program, console=console)
    assert res.returncode == 0, res.stderr
    assert res.stdout == (b"[0] " + b"x" * 300000 + b"\n" + b"[0] 10%\r[0] 20%\r[0] 100%\n"
                          + b"[0] no newline at exit\n")
    assert res.stderr.startswith(b"[0] caf\xc3\xa9 \xff\xfe bytes\n")
    assert log(sgpu, 0, "stdout") == b"x" * 300000 + b"\n10%\r20%\r100%\nno newline at exit"


def test_ranks_selects_the_console_and_everything_is_still_logged(sgpu):
    res = sgpu.run("launch", "--nproc", 4, "--ranks", "0,3", "--no-python", "sh", "-c", "echo hello from $RANK")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["[0] hello from 0", "[3] hello from 3"]
    for r in range(4):
        assert log(sgpu, r, "stdout") == f"hello from {r}\n".encode()


@pytest.mark.parametrize("args,message", [
    (["--ranks", "4"], "--ranks: rank 4 is not in the job, which has 4 ranks (0-3)"),
    (["--ranks", "1,x"], "--ranks 1,x: 'x' is not a rank"),
    (["--raw", "--ranks", "0,1"], "--raw shows one rank's bytes untouched, but --ranks names 2"),
    (["-o", "yaml"], '--output yaml: expected one of "text", "json"'),
])
def test_bad_output_options_are_clear_errors(sgpu, args, message):
    res = sgpu.run("launch", "--nproc", 4, *args, "--no-python", "true")
    assert res.returncode == 2
    assert message in res.stderr, res.stderr


@pytest.mark.parametrize("console", ["pipes", "files"])
def test_timestamps(sgpu, console):
    res = run_bytes(sgpu, "launch", "--nproc", 2, "--timestamps", "--no-python", "sh", "-c", "echo hi; printf bye",
                    console=console)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.decode().splitlines()
    assert len(lines) == 4, lines
    for line in lines:
        assert re.fullmatch(r"\[[01]\] \d\d:\d\d:\d\d\.\d{3} (hi|bye)", line), line


def test_a_binary_result_is_named_not_mangled(sgpu):
    # A pickle (bytes that are not UTF-8) has no JSON form: result is null and
    # result_file says where its bytes are, untouched; text results keep theirs.
    script = (r'case $RANK in 0) printf "\200\005K\052." > "$SGPU_RESULT_FILE";; '
              '1) echo \'{"acc": 1}\' > "$SGPU_RESULT_FILE";; esac')
    res = sgpu.run("launch", "--nproc", 3, "-o", "json", "--no-python", "sh", "-c", script)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["results"] == [None, {"acc": 1}, None]
    rows = doc["ranks"]
    assert rows[0]["result_file"] == f"{doc['run_dir']}/ranks/0/result"
    assert open(rows[0]["result_file"], "rb").read() == b"\x80\x05K*."
    assert rows[1]["result_file"] == f"{doc['run_dir']}/ranks/1/result"
    assert rows[2]["result_file"] is None  # rank 2 wrote none


def test_results_in_rank_order_and_the_json_document(sgpu):
    script = ('case $RANK in 0) echo \'{"loss": 0.25, "steps": [1, 2]}\' > "$SGPU_RESULT_FILE";; '
              '1) echo done > "$SGPU_RESULT_FILE";; 3) printf "{broken" > "$SGPU_RESULT_FILE";; esac; echo line $RANK')
    res = sgpu.run("launch", "--nproc", 4, "-o", "json", "--no-python", "sh", "-c", script)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)  # stdout is the document alone; the job's lines went to stderr
    assert sorted(re.findall(r"^\[\d\] line \d$", res.stderr, re.M)) == [f"[{r}] line {r}" for r in range(4)]
    assert doc["results"] == [{"loss": 0.25, "steps": [1, 2]}, "done", None, "{broken"]
    assert all("result" not in r for r in doc["ranks"])  # once, in results
    assert doc["version"] == 2 and doc["exit_code"] == 0 and doc["timed_out"] is False
    assert doc["status"] == "completed" and doc["root_cause"] is None
    assert doc["run_dir"] == run_dir(sgpu) and doc["run_id"] == os.path.basename(run_dir(sgpu))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", doc["started_at"])
    assert doc["ended_at"] >= doc["started_at"]
    spec = doc["spec"]
    assert spec["world_size"] == 4 and spec["entrypoint"]["kind"] == "executable"
    assert spec["argv"][:2] == ["sh", "-c"] and spec["console"]["output"] == "json"
    for r, rank in enumerate(doc["ranks"]):
        assert rank["rank"] == r and rank["exit_code"] == 0 and rank["signal"] is None
        assert rank["verdict"] == "ok" and isinstance(rank["pid"], int) and rank["duration_s"] >= 0
        assert rank["host"] == os.uname().nodename
    with open(os.path.join(run_dir(sgpu), "summary.json")) as f:
        assert json.load(f) == doc
    with open(os.path.join(run_dir(sgpu), "spec.json")) as f:
        assert json.load(f) == spec


def test_a_failure_without_error_file_shows_the_last_lines_of_stderr(sgpu):
    script = ('if [ "$RANK" = 2 ]; then for i in $(seq 1 30); do echo "err line $i" >&2; done; exit 3; fi; '
              'exec sleep 30')
    res = sgpu.run("launch", "--nproc", 3, "--no-python", "sh", "-c", script)
    assert res.returncode == 3
    err = res.stderr
    assert "sgpu: rank 2 failed first: exit 3; 2 other ranks stopped by sgpu (exit code 3)" in err
    table = err[err.index("  rank  host"):]
    assert re.search(r"^\s+2\s+\S+\s+\d+\s+3\s+\S+\s+FAILED \(root cause\)$", table, re.M), table
    for r in (0, 1):
        assert re.search(rf"^\s+{r}\s+\S+\s+\d+\s+SIGTERM\s+\S+\s+terminated by sgpu$", table, re.M), table
    tail = err[err.index("last lines of its stderr"):]
    assert [ln.strip() for ln in tail.splitlines()[1:21]] == [f"err line {i}" for i in range(11, 31)]
    events = [json.loads(line) for line in open(os.path.join(run_dir(sgpu), "events.jsonl"))]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert kinds.count("rank_started") == 3 and kinds.count("rank_exited") == 3 and kinds.count("teardown") == 1
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", e["ts"]) for e in events)
    first_exit = next(e for e in events if e["event"] == "rank_exited")
    assert first_exit["rank"] == 2 and first_exit["exit_code"] == 3 and first_exit["terminated_by_sgpu"] is False
    teardown = next(e for e in events if e["event"] == "teardown")
    assert teardown == {"ts": teardown["ts"], "event": "teardown", "attempt": 0, "reason": "rank_failed", "rank": 2}
    assert events[-1]["exit_code"] == 3 and events[-1]["status"] == "rank_failed"


def test_a_flat_error_file_is_the_root_cause(sgpu):
    script = ('if [ "$RANK" = 1 ]; then echo \'{"message": "Signal 6 (SIGABRT) received by PID 9", '
              '"timestamp": 1700000000}\' > "$TORCHELASTIC_ERROR_FILE"; kill -ABRT $$; fi; exec sleep 30')
    res = sgpu.run("launch", "--nproc", 2, "-o", "json", "--no-python", "sh", "-c", script)
    assert res.returncode == 134
    assert "root cause: rank 1 (pid" in res.stderr
    assert "was killed by SIGABRT (signal 6): Signal 6 (SIGABRT) received by PID 9" in res.stderr
    cause = json.loads(res.stdout)["root_cause"]
    assert cause["rank"] == 1 and cause["signal"] == "SIGABRT" and cause["source"] == "error_file"
    assert cause["error_file"] == {"message": "Signal 6 (SIGABRT) received by PID 9", "timestamp": 1700000000}


def test_torch_record_traceback_is_the_root_cause_and_goes_up_to_a_parent_launcher(sgpu, tmp_path):
    parent_error_file = tmp_path / "parent-error.json"
    env = dict(sgpu.env, FAIL_RANK="1", TORCHELASTIC_ERROR_FILE=str(parent_error_file))
    res = sgpu.run("launch", "--nproc", 2, "--grace", "5s", python_program("record_fail.py"), env=env, timeout=300)
    assert res.returncode == 1, res.stderr
    err = res.stderr
    table = err[err.index("  rank  host"):err.index("sgpu: root cause")]
    assert re.search(r"^\s+1\s+\S+\s+\d+\s+1\s+\S+\s+FAILED \(root cause\)$", table, re.M), table
    # Rank 0 is stopped by sgpu, whether SIGTERM or gloo noticing its lost peer ends it first.
    assert re.search(r"^\s+0\s+\S+\s+\d+\s+(SIGTERM|1)\s+\S+\s+terminated by sgpu$", table, re.M), table
    cause = err[err.index("sgpu: root cause"):]
    assert re.match(r"sgpu: root cause: rank 1 \(pid \d+ on \S+\) exited with code 1: "
                    r"RuntimeError: boom from rank 1 at step 7\n", cause), cause
    assert "traceback (" + os.path.join(run_dir(sgpu), "ranks", "1", "error.json") + "):" in cause
    assert re.search(r'File ".*record_fail.py", line \d+, in check_batch', cause), cause
    # sgpu's own error file, in the nested form torch's launchers read.
    doc = json.loads(parent_error_file.read_text())
    assert doc["message"]["errorCode"] == 1
    assert doc["message"]["message"] == "RuntimeError: boom from rank 1 at step 7"
    assert "in check_batch" in doc["message"]["extraInfo"]["py_callstack"]
    # What torchrun itself would make of it.
    check = ("import sys; from torch.distributed.elastic.multiprocessing.errors import ProcessFailure; "
             "f = ProcessFailure(local_rank=0, pid=1, exitcode=1, error_file=sys.argv[1]); "
             "print(f.message['message'], f.timestamp > 0)")
    out = subprocess.run([TORCH_PYTHON, "-c", check, str(parent_error_file)], capture_output=True, text=True)
    assert out.stdout.strip() == "RuntimeError: boom from rank 1 at step 7 True", out.stderr


def test_no_colour_and_no_status_line_when_not_a_terminal(sgpu):
    res = sgpu.run("launch", "--nproc", 2, "--no-python", "sh", "-c", "echo out; echo err >&2; sleep 1.5")
    assert res.returncode == 0
    assert "\x1b" not in res.stdout and "\x1b" not in res.stderr


def in_terminal(sgpu, command, env):
    """Runs `sgpu command` under a pseudo-terminal (util-linux script) and returns its transcript."""
    line = " ".join(f"'{a}'" for a in [sgpu.bin, *map(str, command)])
    res = subprocess.run(["script", "-qefc", f"stty cols 150; {line}", "/dev/null"], env=env, cwd=sgpu.cwd,
                         capture_output=True, stdin=subprocess.DEVNULL, timeout=60)
    return res.returncode, res.stdout.decode(errors="replace").replace("\r\n", "\n")


ERASE = "\r\x1b[K"  # how sgpu erases its status line: carriage return, erase to the end of the line


def status_lines(text):
    """The status lines drawn: text after an erase, up to the next erase, with no newline."""
    return re.findall(r"\r\x1b\[K([^\n\r\x1b]*)(?=\r\x1b\[K)", text)


def without_status(text):
    return re.sub(r"\r\x1b\[K[^\n\r\x1b]*(?=\r\x1b\[K)", "", text).replace(ERASE, "")


def test_status_line_and_colours_on_a_terminal(sgpu):
    script = 'for i in 1 2 3 4 5 6 7; do echo "tick $i of $RANK"; sleep 0.4; done; [ $RANK = 1 ] && exit 0; sleep 0.5'
    code, text = in_terminal(sgpu, ["launch", "--nproc", 3, "--timeout", "1h", "--no-python", "sh", "-c", script],
                             sgpu.env)
    assert code == 0, text
    statuses = [s for s in status_lines(text) if s]
    assert any(re.fullmatch(r"sgpu: 3 running, 0 exited of 3 \| 0:00:0[1-3] elapsed \| 0:59:5\d left", s)
               for s in statuses), statuses
    assert any(re.fullmatch(r"sgpu: 2 running, 1 exited of 3 \| 0:00:0\d elapsed \| 0:59:5\d left", s)
               for s in statuses), statuses
    # Without the status line, the job's lines are whole, one per line, coloured by rank.
    lines = [ln for ln in without_status(text).split("\n") if "tick" in ln]
    assert len(lines) == 21, lines
    colours = {"0": "36", "1": "33", "2": "32"}
    for ln in lines:
        m = re.fullmatch(r"\x1b\[(\d+)m\[(\d)\]\x1b\[0m tick \d of (\d)", ln)
        assert m and m.group(2) == m.group(3) and colours[m.group(2)] == m.group(1), repr(ln)
    # Erased for good before the report.
    report = text[text.rindex(ERASE):]
    assert re.fullmatch(r"\r\x1b\[Ksgpu: 3 ranks exited 0 in [\d.]+s; logs in \S+\n", report), repr(report)


def test_no_color_on_a_terminal(sgpu):
    env = dict(sgpu.env, NO_COLOR="1")
    script = "echo hi $RANK; sleep 1.5"
    code, text = in_terminal(sgpu, ["launch", "--nproc", 2, "--no-python", "sh", "-c", script], env)
    assert code == 0, text
    assert status_lines(text)  # still a status line: it is not colour
    assert sorted(re.findall(r"^\[\d\] hi \d$", without_status(text), re.M)) == ["[0] hi 0", "[1] hi 1"]
    assert "\x1b[3" not in text and "\x1b[0m" not in text


def test_a_rank_that_prints_nothing_still_gets_empty_logs(sgpu):
    # Logs are created on a rank's first byte (README "Run directory"); the
    # silent ones get empty files when the run ends, so every rank has both.
    res = sgpu.run("launch", "--nproc", 2, "--no-python", "/bin/sh", "-c", '[ "$RANK" = 1 ] && echo one >&2; true')
    assert res.returncode == 0, res.stderr
    assert log(sgpu, 0, "stdout") == b"" and log(sgpu, 0, "stderr") == b""
    assert log(sgpu, 1, "stdout") == b"" and log(sgpu, 1, "stderr") == b"one\n"


def test_stdout_pipes_are_256_kib_and_stderr_keeps_the_default(sgpu):
    # Fewer, bigger reads: a fifth less of sgpu's CPU per GiB (rank_pipe_size).
    script = "import fcntl\nprint(fcntl.fcntl(1, 1032), fcntl.fcntl(2, 1032))"  # F_GETPIPE_SZ
    res = run_bytes(sgpu, "launch", "--nproc", 2, *no_python("-c", script))
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(res.stdout.splitlines()) == [b"[0] 262144 65536", b"[1] 262144 65536"]


def test_a_burst_from_eight_ranks_through_a_stalled_reader_is_exact_on_console_and_in_logs(sgpu):
    # 8 ranks, 3 MB each, full pipes, while the reader stops for a while:
    # backpressure holds the ranks back, and no byte is lost or torn.
    size = 3_000_000
    p = subprocess.Popen([sgpu.bin, "launch", "--nproc", "8", *no_python(python_program("lossless.py"), str(size))],
                         env=sgpu.env, cwd=sgpu.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    first = p.stdout.read(1 << 20)
    time.sleep(0.5)  # the reader's stall itself, not a wait for state
    rest, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-2000:]
    stdout = per_rank(console_segments(first + rest), 8)
    for r in range(8):
        want = lossless.data(r, "o", size)
        assert log(sgpu, r, "stdout") == want
        assert log(sgpu, r, "stderr") == lossless.data(r, "e", size)
        assert stdout[r] == want + b"\n"
