"""PrefetchingReader: read the next files of a list ahead, in a bounded pool, while the job works.

At most ``depth`` files are in flight or waiting in memory at any time (besides the one the job holds).
A read whose data was ready when the job asked for it is a hit, one the job had to wait for is a miss;
both, the bytes returned and the time the job waited go to the training metrics.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from .. import metrics


def _read(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


class PrefetchingReader:
    """Iterate ``(path, bytes)`` over ``paths`` in order, reading up to ``depth`` files ahead with ``workers``
    threads."""

    def __init__(self, paths: Iterable[str | os.PathLike[str]], depth: int = 8, workers: int = 4):
        for name, value in (("depth", depth), ("workers", workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer; got {value!r}")
        self.paths = [Path(p) for p in paths]
        self.depth = depth
        self.workers = workers
        self.hits = 0
        """Reads whose data was ready when asked."""
        self.misses = 0
        """Reads the job had to wait for."""

    @property
    def hit_ratio(self) -> float:
        """Hits over all reads so far (0 before the first)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def __iter__(self) -> Iterator[tuple[Path, bytes]]:
        pending: deque[tuple[Path, Future[bytes]]] = deque()
        upcoming = iter(self.paths)
        with ThreadPoolExecutor(max_workers=min(self.workers, self.depth), thread_name_prefix="prefetch") as pool:

            def top_up() -> None:
                while len(pending) < self.depth and (path := next(upcoming, None)) is not None:
                    pending.append((path, pool.submit(_read, path)))

            try:
                top_up()
                while pending:
                    path, future = pending.popleft()
                    asked = time.perf_counter()
                    ready = future.done()
                    data = future.result()
                    metrics.READ_SECONDS.observe(time.perf_counter() - asked)
                    metrics.READ_BYTES.inc(len(data))
                    if ready:
                        self.hits += 1
                        metrics.PREFETCH_HITS.inc()
                    else:
                        self.misses += 1
                        metrics.PREFETCH_MISSES.inc()
                    top_up()  # the next files load while the job works on this one
                    yield path, data
            finally:
                for _, waiting in pending:
                    waiting.cancel()
