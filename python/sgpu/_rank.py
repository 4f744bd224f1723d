"""Inside a rank: plain wrappers over the environment sgpu gives every rank."""
from __future__ import annotations

import json
import os
from typing import Any, Optional


def rank() -> int:
    """This process's global rank (``$RANK``); 0 outside a launched job."""
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """Number of ranks in the job (``$WORLD_SIZE``); 1 outside a launched job."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def local_rank() -> int:
    """This process's rank on its node (``$LOCAL_RANK``), the GPU to use; 0 outside a launched job."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def deadline() -> Optional[float]:
    """When the run ends, as UNIX time (``$SGPU_DEADLINE``: ``--timeout``'s
    end, or a SLURM allocation's if sooner); None when it has none or
    outside a launched job. ``sgpu.deadline() - time.time()`` is what is
    left to save a checkpoint in."""
    value = os.environ.get("SGPU_DEADLINE", "")
    try:
        return float(value) if value else None
    except ValueError:
        return None


def save_result(obj: Any) -> Optional[str]:
    """Writes ``obj`` as JSON to ``$SGPU_RESULT_FILE``, where sgpu collects it
    into the summary's ``results`` (``sgpu launch -o json``, :func:`sgpu.launch`).

    Returns the file's path; outside a launched job it writes nothing and
    returns None. A function run with ``.distributed()`` returns its result
    instead (any picklable object).
    """
    path = os.environ.get("SGPU_RESULT_FILE")
    if not path:
        return None
    text = json.dumps(obj)
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text + "\n")
    os.replace(tmp, path)
    return path


def heartbeat(step: "int | None" = None) -> None:
    """Tells sgpu this rank is making progress: touches
    ``$SGPU_HEARTBEAT_FILE``. For a rank that prints nothing for long (a long
    evaluation, a checkpoint): without output or a heartbeat for the hang
    timeout (``--hang-timeout``), sgpu takes every rank's stack and ends the
    job as hung. With ``step``, the file also says which step the rank is at:
    sgpu's samples (``--sample-every``) turn it into the rank's step rate,
    name the ranks slower than the others (stragglers), and show it in
    ``sgpu top`` and ``/metrics``. Cheap (an ``open`` and a ``pwrite``);
    outside a launched job it does nothing."""
    path = os.environ.get("SGPU_HEARTBEAT_FILE")
    if not path:
        return
    if step is None:
        try:
            os.utime(path)
        except FileNotFoundError:
            with open(path, "a"):
                pass
        return
    # One write of a fixed width at the start: a reader never finds the file
    # empty or half a number in it, as it could between a truncate and a write.
    line = f"{int(step):>20}\n".encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.pwrite(fd, line, 0)
        if os.fstat(fd).st_size > len(line):
            os.ftruncate(fd, len(line))
    finally:
        os.close(fd)
