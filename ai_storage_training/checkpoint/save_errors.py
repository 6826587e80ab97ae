"""What a save that failed in the background tells the job: :class:`CheckpointSaveError`, its cause in one line."""

from __future__ import annotations


class CheckpointSaveError(RuntimeError):
    """A checkpoint save that ran in the background failed: ``error`` is what failed it (its traceback, DCP's
    traces of every rank, is logged at debug level: the message says the cause in one line)."""

    def __init__(self, message: str, error: BaseException):
        super().__init__(message)
        self.error = error


def cause(error: BaseException) -> str:
    """``Type: message`` of what made a save fail: the first failed rank's own exception for DCP's
    ``CheckpointException`` (whose text begins with the ranks and tracebacks), else ``error`` itself."""
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, failure = min(failures.items(), key=lambda item: item[0])
        inner = failure[0] if isinstance(failure, tuple) else failure
        if isinstance(inner, BaseException):
            return f"{type(inner).__name__}: {inner} (rank {rank})"
    return f"{type(error).__name__}: {error}"
