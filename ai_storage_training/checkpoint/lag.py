"""Checkpoint lag: which requested steps are not yet durable, read by the lag and in-flight gauges at each scrape.

A step is *requested* when the job asks for a save and *durable* when it is committed in the durable checkpoint
directory (``AI_STORAGE_CHECKPOINT_DIR``): at the end of the save, or of its promotion when checkpoints land in a
local directory first. A durable step also covers every older request (a newer restore point exists). A save
that failed stays pending for the lag (its state is still not durable) but leaves the in-flight count, which
counts the saves accepted (past the in-flight limit's wait), not failed and not yet durable.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .. import metrics


class CheckpointLag:
    """The requested and durable steps of one job."""

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[int, float] = {}  # step -> when it was requested
        self._accepted: set[int] = set()
        self._newest_requested: int | None = None
        self._newest_durable: int | None = None

    def requested(self, step: int) -> None:
        """The job asked for a save of ``step``."""
        with self._lock:
            self._pending.setdefault(step, self._clock())
            self._newest_requested = step if self._newest_requested is None else max(self._newest_requested, step)

    def accepted(self, step: int) -> None:
        """The save of ``step`` got an in-flight slot and runs."""
        with self._lock:
            if step in self._pending:
                self._accepted.add(step)

    def failed(self, step: int) -> None:
        """The save of ``step`` failed: no longer in flight, still not durable."""
        with self._lock:
            self._accepted.discard(step)

    def durable(self, step: int) -> None:
        """``step`` is committed in the durable directory (also called with the step a job resumed from)."""
        with self._lock:
            for pending in [s for s in self._pending if s <= step]:
                del self._pending[pending]
                self._accepted.discard(pending)
            self._newest_durable = step if self._newest_durable is None else max(self._newest_durable, step)

    def seconds(self) -> float:
        """Seconds since the oldest request not yet covered by a durable step; 0 when every request is durable."""
        with self._lock:
            return max(0.0, self._clock() - min(self._pending.values())) if self._pending else 0.0

    def steps(self) -> int:
        """Newest requested step minus newest durable step (minus 0 before anything is durable); never below 0."""
        with self._lock:
            if self._newest_requested is None:
                return 0
            return max(0, self._newest_requested - (self._newest_durable or 0))

    def in_flight(self) -> int:
        """Saves accepted, not failed and not yet durable."""
        with self._lock:
            return len(self._accepted)


LAG = CheckpointLag()
"""The process's lag, which the gauges read (a job has one; tests may make their own)."""
metrics.LAG_SECONDS.set_function(LAG.seconds)
metrics.LAG_STEPS.set_function(LAG.steps)
metrics.IN_FLIGHT.set_function(LAG.in_flight)
