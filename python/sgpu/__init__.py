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
from ._binary import sgpu_binary
from ._distributed import DistributedFunction, distributed
from ._errors import JobFailed, JobTimeout, RemoteError, RemoteTraceback, SgpuError, UsageError
from ._launch import Summary, command_line, launch
from ._rank import local_rank, rank, save_result, world_size

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
    "distributed",
    "launch",
    "local_rank",
    "rank",
    "save_result",
    "sgpu_binary",
    "world_size",
]
