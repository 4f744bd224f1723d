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


def heartbeat() -> None:
    """Tells sgpu this rank is making progress (``--hang-timeout``): touches
    ``$SGPU_HEARTBEAT_FILE``. For a rank that prints nothing for long (a long
    evaluation, a checkpoint): without output or a heartbeat for the hang
    timeout, sgpu takes every rank's stack and ends the job as hung. Cheap
    (one ``utime``); outside a launched job it does nothing."""
    path = os.environ.get("SGPU_HEARTBEAT_FILE")
    if not path:
        return
    try:
        os.utime(path)
    except FileNotFoundError:
        with open(path, "a"):
            pass
