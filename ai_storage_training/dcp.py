"""PyTorch ``torch.distributed.checkpoint`` (DCP) through the CheckpointManager (the only module importing torch).

Save (every rank; ``dcp.async_save`` the same way, with the default thread executor)::

    manager = CheckpointManager(os.environ["AI_STORAGE_CHECKPOINT_DIR"], keep=3)
    dcp.save(state, storage_writer=manager.writer(step))

Load (every rank; None when there is nothing to resume from; resharding on load works as in DCP)::

    reader = manager.reader()
    if reader is not None:
        dcp.load(state, storage_reader=reader)

:class:`ManagedWriter` builds on DCP's ``FileSystemWriter``: every rank writes its shard files into the step's
staging directory ``.step-NNNNNNNN.tmp-<run id>/`` (DCP fsyncs each file; a CRC32C is computed from the bytes as
they are written, by wrapping DCP's file streams), fsyncs the directories and writes its rank manifest
(``ranks``). The coordinator's ``finish()`` lets DCP write ``.metadata``, checks that every file each rank
reported through torch.distributed is in that rank's manifest, and commits the step once (``COMPLETE`` last,
every file of every rank with size and CRC32C), then applies retention. :class:`ManagedReader` builds on
``FileSystemReader``: rank 0 chooses the newest checkpoint that validates (refusing and setting aside the others),
broadcasts its step, every rank leases it until its data is read.

``manager.rank``/``world_size`` come from torch.distributed when it is initialized; the run id naming the staging
directory is broadcast from rank 0 unless given (``run_id=`` or ``$AI_STORAGE_RUN_ID``). The process-based
async executor is not supported (the writer's checksums live in this process).
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from . import layout, metrics, ranks
from .commit import FileRecord, SummedStream, crc32c_file, fsync_dir, lock_waiting
from .commit import unlock as _unlock

if TYPE_CHECKING:  # the manager imports this module when asked for a DCP writer or reader
    from .checkpoints import Checkpoint, CheckpointManager

METADATA = ".metadata"
"""DCP's global plan, written by the coordinator."""


class _SummingFileSystem(FileSystem):
    """DCP's local filesystem, recording each written file's size and CRC32C by its name."""

    def __init__(self) -> None:
        self.records: dict[str, FileRecord] = {}
        self._mutex = threading.Lock()  # DCP writes files from several threads (thread_count)

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[io.IOBase, None, None]:
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        stream = SummedStream(open(path, "wb"))  # noqa: SIM115 (closed below or by DCP)
        try:
            yield stream
        finally:
            stream.close()
        with self._mutex:
            self.records[Path(path).name] = FileRecord(stream.size, stream.crc32c)


def _join(manager: CheckpointManager) -> None:
    """Take the rank and world size from torch.distributed, and share rank 0's run id when none was given."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if (manager.rank, manager.world_size) not in ((0, 1), (rank, world_size)):
        raise ValueError(
            f"rank/world_size: the manager says {manager.rank}/{manager.world_size}, torch.distributed says "
            f"{rank}/{world_size}; leave them out, they come from torch.distributed"
        )
    if world_size > 1 and not manager.shared_run_id:
        shared = [manager._run_id if rank == 0 else None]
        dist.broadcast_object_list(shared, src=0)
        manager.run_id, manager.shared_run_id = str(shared[0]), True
    manager.rank, manager.world_size = rank, world_size


class ManagedWriter(FileSystemWriter):
    """A DCP storage writer committing ``step`` through ``manager`` (see the module docstring). ``options`` go to
    ``FileSystemWriter`` (``thread_count``, ``single_file_per_rank``, ...); files are always fsynced."""

    def __init__(self, manager: CheckpointManager, step: int, **options: Any):
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected a non-negative integer; got {step!r}")
        if "sync_files" in options or "overwrite" in options:
            raise ValueError("sync_files/overwrite: the manager always fsyncs and never overwrites a committed step")
        _join(manager)
        super().__init__(manager.staging_path(step), sync_files=True, overwrite=False, **options)
        self.summing = _SummingFileSystem()
        self.fs = self.summing
        self.manager, self.step = manager, step
        self._fd: int | None = None
        self._started = time.monotonic()

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id:
            raise ValueError("checkpoint_id: the manager names the directory; pass only storage_writer=")
        super().reset(None)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if not kwargs.get("use_collectives", True) and self.manager.world_size > 1:
            raise ValueError("use_collectives: the global commit needs DCP's collectives (use_collectives=True)")
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        manager = self.manager
        manager.directory.mkdir(parents=True, exist_ok=True)
        if manager.is_coordinator:
            manager.clean(saving=self.step)
            manager._check_new(self.step, held=False)  # FileExistsError early; the commit checks again
        return super().prepare_local_plan(plan)

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        manager, staging = self.manager, Path(self.path)
        try:
            self._fd = lock_waiting(
                manager._lock_path(self.step), shared=True, timeout=manager.timeout, what=f"step {self.step}"
            )
            with contextlib.suppress(FileNotFoundError):
                (staging / layout.rank_manifest(manager.rank)).unlink()  # this rank's, from before
            future = super().write_data(plan, planner)  # DCP's threads are done when it returns
            written = {wr.storage_data.relative_path for wr in future.value()}
            files = {
                n: FileRecord(r.size, r.crc32c, manager.rank) for n, r in self.summing.records.items() if n in written
            }
            fsync_dir(staging)
            fsync_dir(manager.directory)
            ranks.write_manifest(staging, rank=manager.rank, run_id=manager.run_id, step=self.step, files=files)
        except BaseException:
            metrics.SAVE_FAILURES.inc()
            self._release()
            raise
        if not manager.is_coordinator:
            self._release()
        return future

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        manager, staging = self.manager, Path(self.path)
        try:
            super().finish(metadata, results)  # .metadata: temporary name, fsynced, renamed
            fsync_dir(staging)
            self._release()
            files = ranks.wait_for_manifests(
                staging, world_size=manager.world_size, run_id=manager.run_id, timeout=manager.timeout
            )
            reported = {wr.storage_data.relative_path for rank_results in results for wr in rank_results}
            if missing := sorted(reported - set(files)):
                raise RuntimeError(f"{staging.name}: files reported by the ranks but in no manifest: {missing}")
            files[METADATA] = crc32c_file(staging / METADATA)  # rank 0's
            manager.commit(self.step, staging, files)
        except BaseException:
            metrics.SAVE_FAILURES.inc()
            raise
        finally:
            self._release()
        metrics.SAVE_SECONDS.observe(time.monotonic() - self._started)
        manager.retain()

    def _release(self) -> None:
        if self._fd is not None:
            _unlock(self.manager._lock_path(self.step), self._fd, remove=self.manager.world_size == 1)
            self._fd = None


class ManagedReader(FileSystemReader):
    """A DCP storage reader of one validated checkpoint, leased until :meth:`read_data` is done (or
    :meth:`release`). ``checkpoint`` says which step it is."""

    def __init__(self, manager: CheckpointManager, checkpoint: Checkpoint, fd: int):
        super().__init__(checkpoint.path)
        self.manager, self.checkpoint = manager, checkpoint
        self._fd: int | None = fd
        self._started = time.monotonic()

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id:
            raise ValueError("checkpoint_id: the manager chooses the checkpoint; pass only storage_reader=")
        super().reset(None)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        try:
            return super().read_data(plan, planner)
        finally:
            self.release()

    def __del__(self) -> None:  # a dcp.load that failed before reading: the lease ends with the reader
        self.release()

    def __enter__(self) -> ManagedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """End the lease (retention may delete the checkpoint afterwards)."""
        if self._fd is not None:
            _unlock(self.manager._lock_path(self.checkpoint.step), self._fd)
            self._fd = None
            metrics.RESTORE_SECONDS.observe(time.monotonic() - self._started)


def open_reader(
    manager: CheckpointManager, step: int | None, *, rollback: bool = False, timeout: float = 30.0
) -> ManagedReader | None:
    """Rank 0 chooses (validates, refuses, falls back; with ``rollback`` retires newer steps) and broadcasts the
    step; every rank leases it. None on every rank when there is nothing to resume from."""
    _join(manager)
    distributed = manager.world_size > 1
    leased: tuple[Checkpoint, int] | None = None
    decision: object = None
    if manager.is_coordinator:
        try:
            leased = manager._choose(step, timeout)
            if leased is not None and rollback:
                manager.rollback_to(leased[0].step)
            decision = leased[0].step if leased else None
        except Exception as error:
            decision = error
            if not distributed:
                raise
    if distributed:
        shared: list[object] = [decision]
        dist.broadcast_object_list(shared, src=0)
        decision = shared[0]
    if isinstance(decision, Exception):
        raise decision
    if not isinstance(decision, int):
        return None
    if leased is None:
        leased = manager._lease_step(decision, timeout, verify="size")  # rank 0 validated it
    return None if leased is None else ManagedReader(manager, *leased)
