"""Asynchronous checkpoint saves: the job blocks only until its state is copied to host memory.

``AsyncCheckpointer(manager)`` wraps a CheckpointManager. ``save(step, buffers)`` copies the buffers (a dict of
file name -> bytes, memoryview or numpy array) into host memory and returns a Future; the manager's save (write,
fsync, validation, commit, retention) runs in a background thread. For PyTorch, ``save_dcp(step, state_dict)``
calls ``torch.distributed.checkpoint.async_save`` with the manager's DCP storage writer and one DCP stager per
in-flight slot, made once and reused (``staging.make_stager``: host buffers allocated once, pinned under CUDA), and
returns once the staged copy is complete: nothing the job changes afterwards reaches the checkpoint. With
``overlap=True`` the copy runs beside the job's next forward and backward pass instead; :meth:`protect` attaches
the guard that waits for it before the optimizer's step (and a module's forward) can change a tensor.

At most ``max_in_flight`` saves run at once; a save requested at the limit first waits for the oldest one. With
more than one, each DCP save in flight runs its collectives on a process group of its own (one per slot, taken in
turn on every rank): two background saves on one group would interleave their collectives and hang. The
time the job blocks per request (that wait, the copy, and with ``overlap`` the guard's wait for it) goes to
``ai_storage_checkpoint_blocked_seconds``. A step already in flight or committed is refused when it is requested.
A save that fails in the background is raised to the job as :class:`CheckpointSaveError` (its message starts with
the cause) at its next ``save``, ``wait`` or ``close`` (each failure once); ``close()`` (or leaving the ``with``
block) waits for every save.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import metrics as exported
from . import claim, layout
from .commit import read_marker
from .lag import LAG, CheckpointLag
from .records import checked_metrics
from .save_errors import CheckpointSaveError, cause

if TYPE_CHECKING:
    from .staging import Slot

log = logging.getLogger(__name__)


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
    manager's directory is a local landing directory: the promoter then reports the steps durable. ``overlap``:
    ``save_dcp`` returns while its staging copy runs (the job attaches :meth:`protect` first)."""

    def __init__(
        self,
        manager: Any,
        max_in_flight: int = 1,
        *,
        durable: bool = True,
        lag: CheckpointLag = LAG,
        overlap: bool = False,
    ):
        if isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight < 1:
            raise ValueError(
                f"max_in_flight: expected a positive integer (1 = one save at a time); got {max_in_flight!r}"
            )
        if not isinstance(overlap, bool):
            raise ValueError(f"overlap: expected True or False; got {overlap!r}")
        if overlap:
            from .staging import check_overlap

            check_overlap()
        self.manager = manager
        self.max_in_flight = max_in_flight
        self.durable = durable
        self.lag = lag
        self.overlap = overlap
        self.on_saved: list[Callable[[int], object]] = []
        """Called with the step after each successful save (the promoter registers here)."""
        self._pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="checkpoint-save")
        self._lock = threading.Lock()
        self._tracked: list[tuple[int, Future]] = []  # every save whose outcome the job has not been told
        self._settled: weakref.WeakSet[Future] = weakref.WeakSet()  # outcomes already counted (lag, on_saved)
        self._dcp_saves: weakref.WeakSet[Future] = weakref.WeakSet()  # save_dcp's (a failed one's staging goes)
        self._slots: list[Slot] = []  # save_dcp's stagers and groups, one per save that may be in flight
        self._dcp_calls = 0
        self._staging: list[tuple[Future, float]] = []  # overlapped staging copies: (done when staged, blocked so far)
        self._guarded = self._closed = False
        self._claimed = claim.take(manager)  # last: a refused job leaves nothing running

    def save(self, step: int, buffers: Mapping[str, Any], *, metrics: Mapping[str, float] | None = None) -> Future:
        """Copy ``buffers`` to host memory and save them as checkpoint ``step`` in the background, ``metrics``
        recorded in its marker; return the save's Future (its result is the manager's Checkpoint)."""
        if not isinstance(buffers, Mapping) or not buffers:
            raise ValueError(f"buffers: expected a non-empty dict of file name -> bytes-like; got {type(buffers)!r}")
        names = [layout.file_name(name, "buffers") for name in buffers]
        recorded = checked_metrics(metrics)
        started = self._admit(step)
        copies = {name: memoryview(buffers[name]).tobytes() for name in names}  # the job may change them now
        future = self._pool.submit(self.manager.save, step, _write_files(copies), metrics=recorded)
        self._track(step, future)
        exported.observe_blocked(time.monotonic() - started)
        return future

    def save_dcp(
        self,
        step: int,
        state_dict: dict[str, Any],
        *,
        metrics: Mapping[str, float] | None = None,
        **async_save_kwargs: Any,
    ) -> Future:
        """``torch.distributed.checkpoint.async_save(state_dict, storage_writer=ManagedWriter(manager, step,
        metrics=...), ...)`` with this checkpointer's stager for the slot (or ``async_stager=`` of the caller's own),
        tracked like :meth:`save` (every rank calls it; the writer commits the step once, on the coordinator);
        ``storage_writer=`` a ManagedWriter of the step of your own (a subclass, writer options).
        Returns once the state is staged (with ``overlap``: once staging started); the Future is done when the step
        is saved."""
        from torch.distributed.checkpoint import async_save

        from .staging import make_stager, sync_device

        if self.overlap and not self._guarded:
            raise ValueError(
                "overlap: the staging copy runs while the job trains on; attach the guard first: "
                "checkpointer.protect(optimizer, model). It covers the optimizer's step and the modules' forward "
                "only: any other in-place change of the state (a hand edit, an EMA, a scheduler writing tensors) must "
                "wait for checkpointer.wait_staged(), or the checkpoint is torn and still validates"
            )
        writer = self._writer(step, metrics, async_save_kwargs.pop("storage_writer", None))
        started = self._admit(step)
        slot = self._next_slot()
        given = async_save_kwargs.get("process_group")
        if self.max_in_flight > 1 or given is None:  # never the training's group, nor another save's: collectives
            async_save_kwargs["process_group"] = slot.group_for(given)  # sharing one would interleave and hang
        stager = async_save_kwargs.pop("async_stager", None)
        if stager is None:
            slot.stager = stager = slot.stager or make_stager(self.overlap)
        if self.overlap:
            sync_device()  # the staging copy runs on a stream of its own: the job's queued kernels finish first
        response = async_save(state_dict, storage_writer=writer, async_stager=stager, **async_save_kwargs)
        if isinstance(response, Future):
            upload, staged = response, None
        else:  # an AsyncSaveResponse: the staging copy may still be running
            upload, staged = response.upload_completion, response.staging_completion
        slot.upload = upload
        self._dcp_saves.add(upload)
        self._track(step, upload)
        if staged is not None and self.overlap:
            with self._lock:
                self._staging.append((staged, time.monotonic() - started))
            return upload
        if staged is not None:
            wait_futures([staged])  # never torn: the job may change its tensors only once they are copied
        exported.observe_blocked(time.monotonic() - started)
        return upload

    def _writer(self, step: int, metrics: Mapping[str, float] | None, given: Any) -> Any:
        """The step's DCP writer: ``given`` (of this manager and step) or a new one; bad metrics refused here."""
        from .dcp import ManagedWriter

        if given is None:
            return ManagedWriter(self.manager, step, metrics=metrics)
        if not isinstance(given, ManagedWriter) or given.manager is not self.manager or given.step != step:
            raise ValueError(
                f"storage_writer: expected ManagedWriter(manager, {step}, ...) of this checkpointer's manager; got "
                f"{type(given).__name__} (the step and the manager name the directory the save commits to)"
            )
        if metrics is not None:
            raise ValueError(
                "metrics: with storage_writer=, give them to it: ManagedWriter(manager, step, metrics=...)"
            )
        return given

    def protect(self, optimizer: Any = None, *modules: Any) -> list[Any]:
        """Attach the guard of ``overlap``: the optimizer's step (``register_step_pre_hook``) and each module's
        forward (``register_forward_pre_hook``, for buffers such as BatchNorm's) first wait for the staging copy
        in flight. Returns the hooks' handles (``handle.remove()`` detaches one)."""
        handles = []
        if optimizer is not None:
            handles.append(optimizer.register_step_pre_hook(lambda *_: self.wait_staged()))
        handles += [module.register_forward_pre_hook(lambda *_: self.wait_staged()) for module in modules]
        if not handles:
            raise ValueError("protect: expected the optimizer and/or modules whose tensors the checkpoint holds")
        self._guarded = True
        return handles

    def wait_staged(self) -> None:
        """Return once no staging copy is in flight: from here the job may change its tensors. The wait counts in
        ``ai_storage_checkpoint_blocked_seconds`` with the save's own call."""
        with self._lock:
            pending, self._staging = self._staging, []
        for staged, blocked in pending:
            waited = time.monotonic()
            wait_futures([staged])  # a staging failure fails the upload too: raised like any background failure
            exported.observe_blocked(blocked + time.monotonic() - waited)

    def wait(self) -> None:
        """Wait for every save in flight; raise the first failure not yet raised."""
        self.wait_staged()
        with self._lock:
            pending = [future for _, future in self._tracked]
        wait_futures(pending)
        self._raise_failure()

    def close(self) -> None:
        """Wait for every save in flight, stop the background thread and the stagers, raise a failure not yet
        raised."""
        if self._closed:
            return
        try:
            self.wait()
        finally:
            self._closed = True
            self._pool.shutdown(wait=True)
            for slot in self._slots:
                slot.close()
            if self._claimed:
                claim.release(self.manager)

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
        """Refuse bad steps, a step in flight or committed, and a closed checkpointer, raise a background failure,
        then wait for a free slot; return when the request started."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected a non-negative integer; got {step!r}")
        if self._closed:
            raise RuntimeError("AsyncCheckpointer: save after close(); make a new one")
        started = time.monotonic()
        self.wait_staged()
        self._raise_failure()
        self._refuse_known(step)
        self.lag.requested(step)
        while True:
            with self._lock:
                pending = [future for _, future in self._tracked if not future.done()]
                if len(pending) < self.max_in_flight:
                    return started
            wait_futures(pending, return_when=FIRST_COMPLETED)

    def _refuse_known(self, step: int) -> None:
        """A save of ``step`` in flight, or ``step`` committed, is refused here: saved twice, both saves would
        share one staging directory and fail."""
        with self._lock:
            if any(known == step and not future.done() for known, future in self._tracked):
                raise ValueError(f"step {step}: a save of this step is already in flight; save each step once")
        final_path = getattr(self.manager, "final_path", None)
        if final_path is not None and read_marker(final_path(step)) is not None:
            raise FileExistsError(
                f"step {step}: already committed in {final_path(step).parent}; save a newer step "
                "(or retire this one first: manager.rollback_to)"
            )

    def _next_slot(self) -> Slot:
        """The slot of this ``save_dcp`` call: slots are taken in turn (call ``n`` takes slot ``n % max_in_flight``),
        the same on every rank, so each slot's process group carries one save at a time on all ranks alike; the
        slot's previous save is waited for first."""
        from .staging import Slot

        index = self._dcp_calls % self.max_in_flight
        self._dcp_calls += 1
        if index == len(self._slots):
            self._slots.append(Slot())
        slot = self._slots[index]
        if slot.upload is not None:
            wait_futures([slot.upload])
        return slot

    def _track(self, step: int, future: Future) -> None:
        with self._lock:
            self._tracked.append((step, future))
        self.lag.accepted(step)
        future.add_done_callback(lambda done: self._finished(step, done))

    def _finished(self, step: int, future: Future) -> None:
        """Settle a done save once (the done callback and _raise_failure both call this): the lag is updated and a
        failed DCP save's staging directory removed under the lock, so whichever call comes second returns only
        after it."""
        error = future.exception()
        with self._lock:
            if future in self._settled:
                return
            self._settled.add(future)
            if error is not None:
                self.lag.failed(step)  # raised to the job by _raise_failure, which reads the future itself
                if future in self._dcp_saves:  # DCP gathered every rank's outcome before failing the save: its
                    self.manager.discard(step)  # staging directory would hold the space the next save needs
            elif self.durable:
                self.lag.durable(step)
        if error is not None:
            log.error("checkpoint step %d failed in the background: %s", step, cause(error))
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
            log.debug("checkpoint step %d failed in the background", step, exc_info=error)
            raise CheckpointSaveError(
                f"{cause(error)} (checkpoint step {step}, saved in the background)", error
            ) from None
