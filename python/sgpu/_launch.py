"""``sgpu.launch``: the sgpu binary, run with ``-o json``, from Python."""
from __future__ import annotations

import codecs
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any, Optional, Union

from ._binary import sgpu_binary
from ._errors import SgpuError, UsageError

OptionValue = Union[str, int, float, bool, None, Sequence[Union[str, int]]]


class Summary(dict):  # type: ignore[type-arg]
    """A run's summary: the document sgpu writes to ``<run dir>/summary.json``
    and prints with ``-o json`` (README, "Summary"), as a dict, with the keys
    most read as attributes."""

    @property
    def run_id(self) -> str:
        return str(self.get("run_id", ""))

    @property
    def run_dir(self) -> str:
        return str(self.get("run_dir", ""))

    @property
    def status(self) -> str:
        """``completed``, ``rank_failed``, ``timed_out``, ``interrupted`` or ``spawn_failed``."""
        return str(self.get("status", ""))

    @property
    def exit_code(self) -> int:
        return int(self.get("exit_code", 1))

    @property
    def ok(self) -> bool:
        return self.get("status") == "completed"

    @property
    def results(self) -> list[Any]:
        """Each rank's ``$SGPU_RESULT_FILE`` as JSON or text, in rank order (None: none, or not text)."""
        return list(self.get("results", []))

    @property
    def ranks(self) -> list[dict[str, Any]]:
        return list(self.get("ranks", []))

    @property
    def root_cause(self) -> Optional[dict[str, Any]]:
        cause = self.get("root_cause")
        return dict(cause) if cause else None


def _toml_value(value: Any) -> str:
    """A --set value: sgpu reads it as the key's type (TOML for arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return json.dumps([v if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v) for v in value])
    return str(value)


def _duration(value: Union[str, int, float, None]) -> str:
    if value is None:
        return "none"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    return str(value)


def command_line(entrypoint: Optional[str] = None, args: Sequence[Any] = (), *,
                 overrides: Optional[Mapping[str, Any]] = None, env: Optional[Mapping[str, Any]] = None,
                 **options: OptionValue) -> list[str]:
    """The ``sgpu launch`` command that :func:`launch` runs, without the binary.

    Each keyword is the flag of the same name (``nproc=4`` is ``--nproc 4``,
    ``log_dir=...`` is ``--log-dir ...``): True gives a bare flag, False and
    None leave it out (``timeout="none"`` is no time limit), a list repeats
    it; durations may be seconds (``timeout=90``). ``overrides={"resources.gpus": 8}``
    gives ``--set resources.gpus=8``; ``env={"NCCL_DEBUG": "INFO"}`` gives
    ``--set env.NCCL_DEBUG=INFO`` (every rank's environment, on every backend).
    """
    if options.get("output") not in (None, "json") or options.get("o") not in (None, "json"):
        raise ValueError("sgpu.launch always reads sgpu's JSON summary: leave out output=")
    argv = ["launch"]
    for name, value in options.items():
        if name in ("output", "o") or value is None or value is False:
            continue
        flag = f"--{name.replace('_', '-')}" if len(name) > 1 else f"-{name}"
        if name in ("timeout", "grace", "join_timeout", "heartbeat_timeout", "ssh_connect_timeout"):
            value = _duration(value)  # type: ignore[arg-type]
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    for key, value in (overrides or {}).items():
        argv += ["--set", f"{key}={_toml_value(value)}"]
    for name, value in (env or {}).items():
        argv += ["--set", f"env.{name}={value}"]
    argv += ["-o", "json"]
    if entrypoint is not None:
        argv += ["--", str(entrypoint), *map(str, args)]
    elif args:
        raise ValueError("args without an entrypoint: name the script (or set job.entrypoint in config=)")
    return argv


_PR_SET_PDEATHSIG = 1
_prctl = None
if sys.platform.startswith("linux"):
    try:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        _prctl = None


def _child_setup() -> None:
    # Its own process group: a Ctrl-C on the terminal reaches Python alone,
    # which forwards one SIGINT (sgpu takes a second one as "kill at once").
    # And it dies with this process, which may be killed without warning.
    os.setpgid(0, 0)
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class _Pump(threading.Thread):
    """Copies sgpu's stderr (the ranks' lines and sgpu's report) to ``sink``
    as it arrives, and keeps its last bytes for error messages."""

    KEEP = 64 * 1024

    def __init__(self, stream: IO[bytes], sink: Optional[IO[str]]) -> None:
        super().__init__(daemon=True, name="sgpu-output")
        self.stream, self.sink, self.tail = stream, sink, b""

    def run(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = self.stream.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.tail = (self.tail + chunk)[-self.KEEP:]
            if self.sink is not None:
                try:
                    self.sink.write(decoder.decode(chunk))
                    self.sink.flush()
                except (OSError, ValueError):
                    self.sink = None  # a closed sink stops the copy, not the run

    def text(self) -> str:
        return self.tail.decode(errors="replace")


class _Reader(threading.Thread):
    def __init__(self, stream: IO[bytes]) -> None:
        super().__init__(daemon=True, name="sgpu-summary")
        self.stream, self.data = stream, b""

    def run(self) -> None:
        self.data = self.stream.read()


def run_sgpu(argv: list[str], *, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
             stream: bool = True) -> Summary:
    """Runs ``sgpu <argv>``, copying its stderr to ``sys.stderr`` live, and returns the JSON on its stdout.

    KeyboardInterrupt sends sgpu one SIGINT (it stops every rank, SIGKILL after
    its grace), waits for it to exit and is raised again; a second
    KeyboardInterrupt while waiting sends a second SIGINT, which kills at once.
    """
    full = [sgpu_binary(), *argv]
    proc = subprocess.Popen(full, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=cwd, env=None if env is None else dict(env), preexec_fn=_child_setup)
    assert proc.stdout is not None and proc.stderr is not None
    pump = _Pump(proc.stderr, sys.stderr if stream else None)
    reader = _Reader(proc.stdout)
    pump.start()
    reader.start()
    interrupted = False
    while True:
        try:
            proc.wait()
            break
        except KeyboardInterrupt:
            interrupted = True
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
    reader.join()
    pump.join()
    proc.stdout.close()
    proc.stderr.close()
    if interrupted:
        raise KeyboardInterrupt
    try:
        doc = json.loads(reader.data) if reader.data.strip() else None
    except json.JSONDecodeError:
        doc = None
    # A refusal (exit 2) prints a summary that did not start, as every ending
    # with -o json does; it is still a UsageError here.
    refused = isinstance(doc, dict) and doc.get("status") == "not_started" and proc.returncode == 2
    if not isinstance(doc, dict) or refused:
        message = pump.text().strip() or f"sgpu exited {proc.returncode} without a summary"
        if proc.returncode == 2:
            raise UsageError(message, full)
        raise SgpuError(f"{message} (sgpu exit code {proc.returncode}: {' '.join(full)})")
    return Summary(doc)


def launch(entrypoint: Optional[str] = None, *args: Any, overrides: Optional[Mapping[str, Any]] = None,
           env: Optional[Mapping[str, Any]] = None, cwd: Optional[str] = None, stream: bool = True,
           **options: OptionValue) -> Summary:
    """Runs ``sgpu launch`` and returns its summary.

    ``sgpu.launch("train.py", "--epochs", "3", nproc=4, timeout="1h")`` is
    ``sgpu launch --nproc 4 --timeout 1h -o json -- train.py --epochs 3``:
    keywords are the command line's flags (``gpus``, ``nproc``, ``gpu_type``,
    ``python``, ``module``, ``no_python``, ``timeout``, ``grace``, ``config``,
    ``backend``, ``hosts``, ``log_dir``, ... with ``_`` for ``-``; see
    :func:`command_line`), ``overrides`` are ``--set KEY=VALUE`` of the job
    spec, ``env`` the ranks' extra variables. The ranks' lines and sgpu's
    report go to ``sys.stderr`` as they come (``stream=False``: nowhere; they
    stay in the run directory).

    The summary comes back whatever the run's end: look at ``.status`` and
    ``.exit_code``. Options sgpu refuses raise :class:`UsageError` with its
    message; KeyboardInterrupt stops the run (every rank) and is raised again.
    """
    argv = command_line(entrypoint, args, overrides=overrides, env=env, **options)
    return run_sgpu(argv, cwd=cwd, stream=stream)
