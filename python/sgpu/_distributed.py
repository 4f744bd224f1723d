"""``@sgpu.distributed``: a function that runs once per rank through ``sgpu launch``."""
from __future__ import annotations

import functools
import os
import pickle
import sys
import tempfile
import uuid
from collections.abc import Callable
from typing import Any, Generic, Optional, ParamSpec, TypeVar, Union, overload

from ._errors import JobFailed, JobTimeout, RemoteError, RemoteTraceback, SgpuError
from ._launch import OptionValue, Summary, command_line, run_sgpu

P = ParamSpec("P")
R = TypeVar("R")


def _state_home() -> str:
    home = os.environ.get("SGPU_HOME")
    if home:
        return home
    xdg = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(xdg, "sgpu")


def _reference(fn: Callable[..., Any], wrapper: Any) -> Optional[tuple[str, str]]:
    """(module, qualname) when the ranks can import the function as it is here."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qualname or module not in sys.modules:
        return None
    obj: Any = sys.modules[module]
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return (module, qualname) if obj is wrapper or obj is fn else None


def _python_path() -> str:
    # The ranks import what this process can: its sys.path ('' is the cwd).
    return os.pathsep.join(p or os.getcwd() for p in sys.path)


class DistributedFunction(Generic[P, R]):
    """A function decorated with :func:`distributed`.

    Calling it runs it here, once, as before; ``.distributed(*args, **kwargs)``
    runs one copy per rank and returns every rank's result.
    """

    def __init__(self, fn: Callable[P, R], options: dict[str, Any]) -> None:
        functools.update_wrapper(self, fn)
        self._fn = fn
        self._options = options

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self._fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<sgpu.distributed {getattr(self._fn, '__qualname__', self._fn)!r}>"

    def distributed(self, *args: P.args, **kwargs: P.kwargs) -> list[R]:
        """Runs the function once per rank with these arguments; returns the
        results in rank order.

        The function and its arguments are pickled with cloudpickle (closures
        and functions defined in ``__main__`` too); each rank runs them with
        this interpreter (``sys.executable``) and this ``sys.path`` (as
        ``PYTHONPATH``), with the torchrun environment (``RANK``,
        ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...). The ranks' output
        reaches ``sys.stderr`` as it comes, each line prefixed with its rank.

        Raises the exception of the first rank that raised, as its own type,
        with the rank's traceback as ``__cause__`` (:class:`RemoteTraceback`,
        naming the rank), once every other rank has been stopped;
        :class:`JobTimeout` past the timeout; :class:`JobFailed` when a rank
        died otherwise (a signal, ``os._exit``); KeyboardInterrupt stops
        every rank, then is raised again.
        """
        import cloudpickle  # type: ignore[import-untyped]

        staging = os.path.join(_state_home(), "python")
        os.makedirs(staging, exist_ok=True)
        ref = _reference(self._fn, self)
        code = getattr(self._fn, "__code__", None)
        payload = {"ref": ref, "fn": None if ref else cloudpickle.dumps(self._fn),
                   "filename": code.co_filename if code is not None else None,
                   "args": cloudpickle.dumps((args, kwargs))}
        fd, path = tempfile.mkstemp(prefix=f"payload-{uuid.uuid4().hex[:8]}-", suffix=".pkl", dir=staging)
        with os.fdopen(fd, "wb") as f:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
        options = dict(self._options)
        stream = bool(options.pop("stream", True))
        options.setdefault("python", sys.executable)
        options["module"] = True
        env = dict(os.environ)
        env["PYTHONPATH"] = _python_path()
        summary: Optional[Summary] = None
        try:
            summary = run_sgpu(command_line("sgpu._runner", [path], **options), env=env, stream=stream)
        finally:
            _keep_payload(path, summary)
        return _results(summary)


def _keep_payload(path: str, summary: Optional[Summary]) -> None:
    """The payload ends in the run directory (payload.pkl), beside what the ranks made of it."""
    try:
        if summary is not None and summary.run_dir and os.path.isdir(summary.run_dir):
            os.replace(path, os.path.join(summary.run_dir, "payload.pkl"))
            return
    except OSError:
        pass  # another file system: not worth a copy
    try:
        os.unlink(path)
    except OSError:
        pass


def _read_record(summary: Summary, rank: int) -> Optional[tuple[Any, ...]]:
    rows = summary.ranks
    path = rows[rank].get("result_file") if rank < len(rows) else None
    path = path or os.path.join(summary.run_dir, "ranks", str(rank), "result")
    try:
        with open(path, "rb") as f:
            record = pickle.load(f)
    except FileNotFoundError:
        return None
    if not isinstance(record, tuple) or not record or record[0] not in ("ok", "raised"):
        raise SgpuError(f"{path}: not a result of sgpu's Python runner")
    return record


def _raise_remote(summary: Summary, rank: int, record: tuple[Any, ...]) -> None:
    _, exc_bytes, type_name, message, text = record
    exc: BaseException
    try:
        exc = pickle.loads(exc_bytes) if exc_bytes is not None else RemoteError(type_name, message, rank)
    except Exception:
        exc = RemoteError(type_name, message, rank)
    host = summary.ranks[rank].get("host", "?") if rank < len(summary.ranks) else "?"
    cause = RemoteTraceback(rank, int(summary.get("world_size", 0)), host, text)
    try:
        setattr(exc, "sgpu_rank", rank)  # noqa: B010 - attributes of whatever class the rank raised
        setattr(exc, "sgpu_summary", summary)  # noqa: B010
        if hasattr(exc, "add_note"):
            exc.add_note(f"(raised by rank {rank} of sgpu run {summary.run_id}; logs in {summary.run_dir})")
    except AttributeError:
        pass
    raise exc from cause


def _results(summary: Summary) -> list[Any]:
    if summary.status == "timed_out":
        raise JobTimeout(summary)
    if not summary.ok:
        cause = summary.root_cause or {}
        rank = cause.get("rank")
        if cause.get("reason") == "rank_failed" and isinstance(rank, int):
            record = _read_record(summary, rank)
            if record is not None and record[0] == "raised":
                _raise_remote(summary, rank, record)
        raise JobFailed(summary)
    results = []
    for rank in range(int(summary.get("world_size", len(summary.ranks)))):
        record = _read_record(summary, rank)
        results.append(record[1] if record is not None and record[0] == "ok" else None)
    return results


@overload
def distributed(fn: Callable[P, R], /) -> DistributedFunction[P, R]: ...


@overload
def distributed(*, gpus: Optional[int] = None, gpu_type: Optional[str] = None, nproc: Union[int, str, None] = None,
                remote: bool = False, timeout: Union[str, int, float, None] = "3h",
                **launch_options: OptionValue) -> Callable[[Callable[P, R]], DistributedFunction[P, R]]: ...


def distributed(fn: Any = None, /, *, gpus: Optional[int] = None, gpu_type: Optional[str] = None,
                nproc: Union[int, str, None] = None, remote: bool = False,
                timeout: Union[str, int, float, None] = "3h", **launch_options: Any) -> Any:
    """Makes a function runnable on every GPU (or CPU rank) with ``fn.distributed(...)``.

    ::

        @sgpu.distributed(gpus=8, gpu_type="H100")
        def train(epochs):
            dist.init_process_group("nccl")   # RANK, WORLD_SIZE, MASTER_ADDR... are set
            ...
            return final_loss

        losses = train.distributed(3)        # one result per rank, in rank order

    ``gpus``: GPUs for the job, one rank each (default: every GPU of this
    node, or one CPU rank without GPUs); ``nproc``: CPU ranks instead;
    ``gpu_type``: the GPU type required (``"H100"``), checked against the
    node's; ``timeout``: ``"3h"`` (default), ``"90m"``, seconds, or None for
    no limit. ``remote=False`` runs on this node (``--backend local``);
    ``remote=True`` runs where the job spec (``config=``) or the environment
    says, as ``sgpu launch`` does: inside a SLURM allocation on its nodes,
    with ``backend="ssh", hosts="a:8,b:8"`` over ssh (the function travels in
    a file under ``$SGPU_HOME``, which the nodes must share, as they share
    the interpreter's path). Any other keyword is an ``sgpu launch`` flag
    (``grace="10s"``, ``log_dir=...``, ``gpu_bind="per-rank"``,
    ``config="job.toml"``, ``overrides={...}``, ``env={...}``; see
    :func:`sgpu.launch`); ``stream=False`` keeps the ranks' output off
    ``sys.stderr`` (it stays in the run directory).

    Calling the decorated function runs it here as before; see
    :meth:`DistributedFunction.distributed` for what the run returns and raises.
    """
    options: dict[str, Any] = dict(launch_options)
    if remote and options.get("backend") == "local":
        raise ValueError("remote=True with backend='local': choose one")
    if not remote:
        if options.get("backend") not in (None, "local"):
            raise ValueError(f"backend={options['backend']!r} runs remotely: pass remote=True")
        options["backend"] = "local"
    options.update(gpus=gpus, gpu_type=gpu_type, nproc=nproc, timeout="none" if timeout is None else timeout)

    def wrap(f: Callable[P, R]) -> DistributedFunction[P, R]:
        if not callable(f):
            raise TypeError(f"@sgpu.distributed takes a function, not {type(f).__name__}")
        return DistributedFunction(f, options)

    return wrap(fn) if fn is not None else wrap
