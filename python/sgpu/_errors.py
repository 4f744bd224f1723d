"""The exceptions this package raises."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ._launch import Summary


class SgpuError(Exception):
    """Base class of this package's errors."""


class UsageError(SgpuError, ValueError):
    """sgpu refused the options (its exit code 2); the message is sgpu's."""

    def __init__(self, message: str, argv: list[str]) -> None:
        super().__init__(message)
        self.argv = argv


class JobFailed(SgpuError):
    """A run that did not complete: a rank failed, sgpu was stopped, a node was lost.

    ``summary`` is the run's summary (``summary.json``); ``exit_code`` is
    sgpu's exit code; ``rank`` the root cause's rank, or None.
    """

    def __init__(self, summary: "Summary") -> None:
        self.summary = summary
        self.exit_code: int = summary.exit_code
        cause: dict[str, Any] = summary.root_cause or {}
        self.rank: Optional[int] = cause.get("rank")
        message = cause.get("message") or f"the run ended {summary.status} (exit code {summary.exit_code})"
        details = (cause.get("details") or "").rstrip()
        text = f"{message} (exit code {summary.exit_code}; logs in {summary.run_dir})"
        super().__init__(f"{text}\n{details}" if details else text)


class JobTimeout(JobFailed, TimeoutError):
    """The run went past its timeout; sgpu stopped every rank (exit code 124)."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a rank, set as its ``__cause__``."""

    def __init__(self, rank: int, world_size: int, host: str, traceback_text: str) -> None:
        super().__init__(f"rank {rank} of {world_size} (on {host}) raised:\n\n{traceback_text.rstrip()}")
        self.rank = rank
        self.traceback = traceback_text


class RemoteError(SgpuError):
    """An exception raised in a rank that could not be re-created here (its
    class could not be pickled or imported); ``type_name`` names it."""

    def __init__(self, type_name: str, message: str, rank: int) -> None:
        super().__init__(f"{type_name}: {message}" if message else type_name)
        self.type_name = type_name
        self.rank = rank
