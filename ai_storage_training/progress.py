"""Progress of the long commands (pack, stage, restore-test) on stderr, for a person at a terminal and for a pod's log.

On a terminal a bar is redrawn in place; anywhere else (``kubectl logs``) a whole line is printed each time another
``every`` percent is done. Each shows the share done, the amount and the throughput. A few lines of the standard
library rather than a progress-bar package: the training library installs with two dependencies, and those
packages redraw with carriage returns that a pod's log shows only at the end.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def _amount(value: float, unit: str) -> str:
    if unit != "B":
        return f"{value:,.0f} {unit}"
    for name, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:.1f} {name}"
    return f"{value:.0f} B"


class Progress:
    """``add(amount)`` as work is done (from any thread); ``close()`` prints the last state."""

    def __init__(self, what: str, total: int, unit: str = "B", *, stream: TextIO | None = None, every: float = 5.0):
        self.what, self.total, self.unit, self.every = what, max(total, 0), unit, every
        self.stream = stream if stream is not None else sys.stderr
        self.terminal = self.stream.isatty()
        self.done, self._next, self._drawn = 0, every, 0.0
        self._started = time.monotonic()
        self._lock = threading.Lock()

    def line(self) -> str:
        share = 100.0 * self.done / self.total if self.total else 100.0
        rate = self.done / max(time.monotonic() - self._started, 1e-9)
        bar = ""
        if self.terminal:
            filled = int(share / 100 * 30)
            bar = f"[{'#' * filled}{'.' * (30 - filled)}] "
        return (
            f"{self.what}: {bar}{share:5.1f}% {_amount(self.done, self.unit)} of {_amount(self.total, self.unit)}, "
            f"{_amount(rate, self.unit)}/s"
        )

    def add(self, amount: int = 1) -> None:
        with self._lock:
            self.done += amount
            share = 100.0 * self.done / self.total if self.total else 100.0
            now = time.monotonic()
            if self.terminal and now - self._drawn >= 0.1:
                self._drawn = now
                self.stream.write(f"\r{self.line()}")
                self.stream.flush()
            elif not self.terminal and share >= self._next and share < 100.0:
                self._next = (share // self.every + 1) * self.every
                self.stream.write(f"{self.line()}\n")
                self.stream.flush()

    def close(self) -> None:
        with self._lock:
            self.stream.write(f"\r{self.line()}\n" if self.terminal else f"{self.line()}\n")
            self.stream.flush()
