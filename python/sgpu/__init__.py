"""sgpu from Python: run a function on every GPU of a node (or of many) with
``@sgpu.distributed``, or any entrypoint with ``sgpu.launch``.

::

    import sgpu

    @sgpu.distributed(nproc=4)
    def work(x):
        return x * sgpu.rank()

    work.distributed(10)                    # [0, 10, 20, 30]

    summary = sgpu.launch("train.py", "--epochs", "3", gpus=8)
    summary.exit_code, summary.results

Both drive the ``sgpu`` binary this wheel installs (``$SGPU_BIN`` overrides
it), so runs behave as on the command line: the same environment per rank,
fail-fast teardown, timeout, run directory and ``summary.json``.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._binary import sgpu_binary
    from ._distributed import DistributedFunction, distributed
    from ._errors import JobFailed, JobTimeout, RemoteError, RemoteTraceback, SgpuError, UsageError
    from ._launch import Summary, command_line, launch
    from ._rank import deadline, heartbeat, local_rank, rank, save_result, world_size

# Imported on first use: each rank of fn.distributed() imports this package
# (for sgpu._runner), and most of it is the caller's side.
_WHERE = {
    "sgpu_binary": "_binary",
    "DistributedFunction": "_distributed", "distributed": "_distributed",
    "JobFailed": "_errors", "JobTimeout": "_errors", "RemoteError": "_errors", "RemoteTraceback": "_errors",
    "SgpuError": "_errors", "UsageError": "_errors",
    "Summary": "_launch", "command_line": "_launch", "launch": "_launch",
    "deadline": "_rank", "heartbeat": "_rank", "local_rank": "_rank", "rank": "_rank", "save_result": "_rank",
    "world_size": "_rank",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sgpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__version__ = "0.1.0"

__all__ = [
    "DistributedFunction",
    "JobFailed",
    "JobTimeout",
    "RemoteError",
    "RemoteTraceback",
    "SgpuError",
    "Summary",
    "UsageError",
    "command_line",
    "deadline",
    "distributed",
    "heartbeat",
    "launch",
    "local_rank",
    "rank",
    "save_result",
    "sgpu_binary",
    "world_size",
]
