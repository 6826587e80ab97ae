"""Asynchronous checkpoint saves: the job blocks only while its state is copied to host memory.

``AsyncCheckpointer(manager)`` wraps a CheckpointManager. ``save(step, buffers)`` copies the buffers (a dict of
file name -> bytes, memoryview or numpy array) into host memory and returns a Future; the manager's save (write,
fsync, validation, commit, retention) runs in a background thread. For PyTorch, ``save_dcp(step, state_dict)``
calls ``torch.distributed.checkpoint.async_save`` with the manager's DCP storage writer (DCP stages the state to
CPU memory, then writes in its own thread) and tracks its future the same way.

At most ``max_in_flight`` saves run at once; a save requested at the limit first waits for the oldest one. The
time the job blocks per request (that wait plus the copy) goes to ``ai_storage_checkpoint_blocked_seconds``.
A save that fails in the background is raised to the job as :class:`CheckpointSaveError` at its next ``save``,
``wait`` or ``close`` (each failure once); ``close()`` (or leaving the ``with`` block) waits for every save.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path, PurePosixPath
from typing import Any

from . import layout, metrics
from .lag import LAG, CheckpointLag

log = logging.getLogger(__name__)


class CheckpointSaveError(RuntimeError):
    """A checkpoint save that ran in the background failed (the cause is chained)."""


def _file_name(name: object) -> str:
    """``name`` if it is a relative, visible file name inside a checkpoint; else ValueError naming it."""
    path = PurePosixPath(name) if isinstance(name, str) else None
    if path is None or not path.parts or path.is_absolute() or any(p.startswith(".") for p in path.parts):
        raise ValueError(
            f"buffers: expected relative file names without '..' or hidden parts, e.g. 'model.bin'; got {name!r}"
        )
    assert isinstance(name, str)
    if name == layout.MARKER:
        raise ValueError(f"buffers: the name {layout.MARKER!r} is the checkpoint's marker; choose another file name")
    return name


def _write_files(copies: dict[str, bytes]) -> Callable[[Path], None]:
    def write(directory: Path) -> None:
        for name, data in copies.items():
            path = directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)

    return write


class AsyncCheckpointer:
    """Background saves through ``manager``, at most ``max_in_flight`` at once. ``durable=False`` when the
    manager's directory is a local landing directory: the promoter then reports the steps durable."""

    def __init__(self, manager: Any, max_in_flight: int = 1, *, durable: bool = True, lag: CheckpointLag = LAG):
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(
                f"max_in_flight: expected a positive integer (1 = one save at a time); got {max_in_flight!r}"
            )
        self.manager = manager
        self.max_in_flight = max_in_flight
        self.durable = durable
        self.lag = lag
        self.on_saved: list[Callable[[int], object]] = []
        """Called with the step after each successful save (the promoter registers here)."""
        self._pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="checkpoint-save")
        self._lock = threading.Lock()
        self._tracked: list[tuple[int, Future]] = []  # every save whose outcome the job has not been told
        self._settled: weakref.WeakSet[Future] = weakref.WeakSet()  # outcomes already counted (lag, on_saved)
        self._closed = False

    def save(self, step: int, buffers: Mapping[str, Any]) -> Future:
        """Copy ``buffers`` to host memory and save them as checkpoint ``step`` in the background; return the
        save's Future (its result is the manager's Checkpoint)."""
        if not isinstance(buffers, Mapping) or not buffers:
            raise ValueError(f"buffers: expected a non-empty dict of file name -> bytes-like; got {type(buffers)!r}")
        names = [_file_name(name) for name in buffers]
        started = self._admit(step)
        copies = {name: memoryview(buffers[name]).tobytes() for name in names}  # the job may change them now
        future = self._pool.submit(self.manager.save, step, _write_files(copies))
        return self._track(step, future, started)

    def save_dcp(self, step: int, state_dict: dict[str, Any], **async_save_kwargs: Any) -> Future:
        """``torch.distributed.checkpoint.async_save(state_dict, storage_writer=manager.writer(step), ...)``,
        tracked like :meth:`save` (every rank calls it; the writer commits the step once, on the coordinator)."""
        from torch.distributed.checkpoint import async_save

        started = self._admit(step)
        response = async_save(state_dict, storage_writer=self.manager.writer(step), **async_save_kwargs)
        future = response if isinstance(response, Future) else response.upload_completion  # a custom stager
        return self._track(step, future, started)

    def wait(self) -> None:
        """Wait for every save in flight; raise the first failure not yet raised."""
        with self._lock:
            pending = [future for _, future in self._tracked]
        wait_futures(pending)
        self._raise_failure()

    def close(self) -> None:
        """Wait for every save in flight, stop the background thread, raise a failure not yet raised."""
        if self._closed:
            return
        try:
            self.wait()
        finally:
            self._closed = True
            self._pool.shutdown(wait=True)

    def __enter__(self) -> AsyncCheckpointer:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if error is None:
            self.close()
            return
        try:  # the job is failing already: still wait for the saves, report theirs without hiding its error
            self.close()
        except CheckpointSaveError as failure:
            log.error("%s", failure)

    def _admit(self, step: int) -> float:
        """Refuse bad steps and a closed checkpointer, raise a background failure, then wait for a free slot;
        return when the request started."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected a non-negative integer; got {step!r}")
        if self._closed:
            raise RuntimeError("AsyncCheckpointer: save after close(); make a new one")
        started = time.monotonic()
        self._raise_failure()
        self.lag.requested(step)
        while True:
            with self._lock:
                pending = [future for _, future in self._tracked if not future.done()]
                if len(pending) < self.max_in_flight:
                    return started
            wait_futures(pending, return_when=FIRST_COMPLETED)

    def _track(self, step: int, future: Future, started: float) -> Future:
        with self._lock:
            self._tracked.append((step, future))
        self.lag.accepted(step)
        metrics.BLOCKED_SECONDS.observe(time.monotonic() - started)
        future.add_done_callback(lambda done: self._finished(step, done))
        return future

    def _finished(self, step: int, future: Future) -> None:
        """Settle a done save once (the done callback and _raise_failure both call this): the lag is updated
        under the lock, so whichever call comes second returns only after it."""
        error = future.exception()
        with self._lock:
            if future in self._settled:
                return
            self._settled.add(future)
            if error is not None:
                self.lag.failed(step)  # raised to the job by _raise_failure, which reads the future itself
            elif self.durable:
                self.lag.durable(step)
        if error is not None:
            log.error("checkpoint step %d failed in the background: %s", step, error)
            return
        for callback in self.on_saved:
            callback(step)

    def _raise_failure(self) -> None:
        """Forget the saves that are done; raise the first that failed (later failures wait for the next call)."""
        keep: list[tuple[int, Future]] = []
        first: tuple[int, BaseException] | None = None
        with self._lock:
            done = [(step, future) for step, future in self._tracked if future.done()]
        for step, future in done:  # settled here too: a done callback may still be on its way
            self._finished(step, future)
        with self._lock:
            for step, future in self._tracked:
                if not future.done():
                    keep.append((step, future))
                elif (error := future.exception()) is not None:
                    if first is None:
                        first = (step, error)
                    else:
                        keep.append((step, future))
            self._tracked = keep
        if first is not None:
            step, error = first
            raise CheckpointSaveError(f"checkpoint step {step} failed in the background: {error}") from error
