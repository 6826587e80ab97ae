"""PyTorch ``torch.distributed.checkpoint`` (DCP) through the CheckpointManager (the only module importing torch).

Save (every rank; ``dcp.async_save`` the same way, with the default thread executor)::

    manager = CheckpointManager(os.environ["AI_STORAGE_CHECKPOINT_DIR"], keep=3)
    dcp.save(state, storage_writer=manager.writer(step))

Load (every rank; None when there is nothing to resume from; resharding on load works as in DCP)::

    checkpoint = restore(manager, state)        # dcp.load through manager.reader(), falling back past a bad step

:class:`ManagedWriter` builds on DCP's ``FileSystemWriter``: every rank writes its shard files into the step's
staging directory ``.step-NNNNNNNN.tmp-<run id>/`` (DCP fsyncs each file; a CRC32C is computed from the bytes as
they are written, by wrapping DCP's file streams), fsyncs the directories and writes its rank manifest
(``ranks``) and the size and CRC32C of each item it wrote (``__<rank>.items.json``: DCP's items begin and end at
the stream's ``tell()``). The coordinator's ``finish()`` lets DCP write ``.metadata``, checks that every file each rank
reported through torch.distributed is in that rank's manifest, and commits the step once (``COMPLETE`` last,
every file of every rank with size and CRC32C), then applies retention. :class:`ManagedReader` builds on
``FileSystemReader``: rank 0 chooses the newest checkpoint whose files have their sizes and whose small files
(``.metadata``, the items files, any file no items file covers) validate, refusing and setting aside the others,
and broadcasts its step; every rank leases it until its data is read, and verifies each item's CRC32C as it reads
it (every byte is read once). :func:`restore` is the load a job calls: an item that fails its check refuses the
step, and the load starts again from the newest step that validates, so the state never stays partly loaded from
a refused step without an error saying so.

:func:`make_stager` gives ``AsyncCheckpointer.save_dcp`` one DCP stager per in-flight save, made once.

``manager.rank``/``world_size`` come from torch.distributed when it is initialized; the run id naming the staging
directory is broadcast from rank 0 unless given (``run_id=`` or ``$AI_STORAGE_RUN_ID``). The process-based
async executor is not supported (the writer's checksums live in this process).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import crc32c
import torch
import torch.distributed as dist
from torch.distributed._state_dict_utils import CompanionMismatch
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint import load as dcp_load
from torch.distributed.checkpoint._state_dict_stager import StateDictStager
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystem, _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
from torch.distributed.checkpoint.staging import AsyncStager, BlockingAsyncStager, DefaultStager, StagingOptions
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from . import layout, metrics, ranks
from .commit import (
    CheckpointInvalidError,
    FileRecord,
    SummedStream,
    crc32c_file,
    fsync_dir,
    item_records,
    lock_waiting,
    read_marker,
    write_item_records,
)
from .commit import unlock as _unlock

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # the manager imports this module when asked for a DCP writer or reader
    from .checkpoints import Checkpoint, CheckpointManager

METADATA = ".metadata"
"""DCP's global plan, written by the coordinator."""
REQUIRE_VARIABLE = "AI_STORAGE_REQUIRE_CHECKPOINT"
"""Set to 1: :func:`restore` fails when there is no checkpoint to resume from (an unmounted volume, a typo)."""
WRITER_THREADS = 1
"""DCP writer threads per rank (``thread_count``): see docs/training.md for the measurement behind it."""

Items = dict[str, dict[int, tuple[int, int]]]
"""file -> offset -> (length, CRC32C) of each item written."""


class _ItemSummedStream(SummedStream):
    """A :class:`SummedStream` that also keeps the CRC32C of each item: DCP calls ``tell()`` where an item begins
    and where it ends, so each stretch between two calls is one item."""

    def __init__(self, raw: IO[bytes]):
        super().__init__(raw)
        self.items: dict[int, tuple[int, int]] = {}
        self._start, self._item_crc = 0, 0

    def write(self, data: Any) -> int:
        self._item_crc = crc32c.crc32c(data, self._item_crc)
        return super().write(data)

    def tell(self) -> int:
        if self.size > self._start:
            self.items[self._start] = (self.size - self._start, self._item_crc)
        self._start, self._item_crc = self.size, 0
        return self.size


class _SummingFileSystem(FileSystem):
    """DCP's local filesystem, recording each written file's size and CRC32C by its name."""

    def __init__(self) -> None:
        self.records: dict[str, FileRecord] = {}
        self.items: Items = {}
        self._mutex = threading.Lock()  # DCP writes files from several threads (thread_count)

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[io.IOBase, None, None]:
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        stream = _ItemSummedStream(open(path, "wb"))  # noqa: SIM115 (closed below or by DCP)
        try:
            yield stream
        finally:
            stream.close()
        stream.tell()  # the last item
        with self._mutex:
            self.records[Path(path).name] = FileRecord(stream.size, stream.crc32c)
            self.items[Path(path).name] = stream.items

    def written_items(self, results: list[WriteResult]) -> Items:
        """The checksums of the items in ``results``, for each file whose every item begins and ends where DCP
        told the stream (a file with one that does not is left out: its reader verifies it whole)."""
        found: Items = {}
        unmatched: set[str] = set()
        for result in results:
            info: _StorageInfo = result.storage_data
            record = self.items.get(info.relative_path, {}).get(info.offset)
            if record is None or record[0] != info.length:
                unmatched.add(info.relative_path)
            else:
                found.setdefault(info.relative_path, {})[info.offset] = record
        return {name: ranges for name, ranges in found.items() if name not in unmatched}


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
        options.setdefault("thread_count", WRITER_THREADS)
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
            files = {n: FileRecord(r.size, r.crc32c, manager.rank) for n, r in self.summing.records.items()}
            items_file = staging / layout.item_checksums(manager.rank)
            write_item_records(items_file, self.summing.written_items(future.value()))
            record = crc32c_file(items_file)
            files[items_file.name] = FileRecord(record.size, record.crc32c, manager.rank)
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
    """A DCP storage reader of one checkpoint, leased until :meth:`read_data` is done (or :meth:`release`).
    ``checkpoint`` says which step it is. Each item is read once and checked against its CRC32C as it is read
    (``verify_items``: the manager's ``verify`` is ``"crc32c"``); a mismatch raises CheckpointInvalidError."""

    def __init__(self, manager: CheckpointManager, checkpoint: Checkpoint, fd: int):
        super().__init__(checkpoint.path)
        self.manager, self.checkpoint = manager, checkpoint
        self._fd: int | None = fd
        self._started = time.monotonic()
        self.verify_items = manager.verify == "crc32c"
        self.refused = False
        self.items: Items = {}
        if self.verify_items:
            marker = read_marker(checkpoint.path)
            try:
                self.items = item_records(checkpoint.path, marker) if marker is not None else {}
            except (OSError, ValueError, KeyError, TypeError) as error:
                self.release()
                problem = f"{checkpoint.path}: its item checksums are unreadable: {error}"
                raise CheckpointInvalidError(problem) from error

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id:
            raise ValueError("checkpoint_id: the manager chooses the checkpoint; pass only storage_reader=")
        super().reset(None)

    def _slice_file(self, file: Any, sinfo: _StorageInfo) -> IO[bytes]:
        """The item's bytes, read once and checked against their CRC32C (files no items file covers were
        checked whole when the step was chosen)."""
        expected = self.items.get(sinfo.relative_path, {}).get(sinfo.offset) if self.verify_items else None
        if expected is None:
            return super()._slice_file(file, sinfo)
        file.seek(sinfo.offset)
        data = file.read(sinfo.length)
        actual = (len(data), crc32c.crc32c(data))
        if actual != expected:
            self.refused = True  # counted where the step is refused (restore), not as a restore
            raise CheckpointInvalidError(
                f"{self.checkpoint.path / sinfo.relative_path}: the item at offset {sinfo.offset} has "
                f"{actual[0]} bytes with CRC32C {actual[1]:08x}; written: {expected[0]} bytes, {expected[1]:08x}"
            )
        return io.BytesIO(data)

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
            if not self.refused:
                metrics.RESTORE_SECONDS.observe(time.monotonic() - self._started)


def open_reader(
    manager: CheckpointManager,
    step: int | None,
    *,
    rollback: bool = False,
    timeout: float = 30.0,
    require: bool = False,
) -> ManagedReader | None:
    """Rank 0 chooses (validates, refuses, falls back; with ``rollback`` retires newer steps) and broadcasts the
    step; every rank leases it. None on every rank when there is nothing to resume from (logged once, naming the
    directory and whether it exists); ``require`` (or ``$AI_STORAGE_REQUIRE_CHECKPOINT=1``) raises instead."""
    _join(manager)
    distributed = manager.world_size > 1
    leased: tuple[Checkpoint, int] | None = None
    decision: object = None
    if manager.is_coordinator:
        try:
            verify = "items" if manager.verify == "crc32c" else manager.verify  # items: checked while read
            leased = manager._choose(step, timeout, verify=verify)
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
        return _nothing_to_resume(manager, require)
    if leased is None:
        leased = manager._lease_step(decision, timeout, verify="size")  # rank 0 validated it
    return None if leased is None else ManagedReader(manager, *leased)


def _nothing_to_resume(manager: CheckpointManager, require: bool) -> None:
    """Say once (rank 0) that there is no checkpoint, and why that may be; raise when one is required."""
    directory = manager.directory
    why = "exists but holds no committed checkpoint" if directory.is_dir() else "does not exist"
    required = require or os.environ.get(REQUIRE_VARIABLE, "") not in ("", "0")
    if required:
        raise FileNotFoundError(
            f"no checkpoint to resume from: {directory} {why} (a checkpoint is required: require=True or "
            f"${REQUIRE_VARIABLE}=1); is the volume mounted at that path?"
        )
    if manager.is_coordinator:
        log.warning("no checkpoint to resume from: %s %s; starting from the beginning", directory, why)
    return None


def restore(
    manager: CheckpointManager,
    state_dict: dict[str, Any] | Callable[[], dict[str, Any]],
    *,
    step: int | None = None,
    rollback: bool = False,
    require: bool = False,
    **load_kwargs: Any,
) -> Checkpoint | None:
    """``dcp.load(state_dict, storage_reader=manager.reader(...))`` on every rank; returns the checkpoint loaded,
    or None when there is nothing to resume from (``require`` raises then). An item found corrupt while reading
    refuses the step (moved to ``.refused/``) and the load starts again from the newest step that validates, which
    overwrites everything the refused one had loaded; with ``step`` given, or no older step left,
    CheckpointInvalidError says the state is partly loaded. ``state_dict`` may be a function making it, called
    once there is a checkpoint to load (DCP's ``get_state_dict`` initializes an optimizer's empty state)."""
    loaded_from: int | None = None
    while True:
        reader = open_reader(manager, step, rollback=rollback, require=require and loaded_from is None)
        if reader is None:
            if loaded_from is not None:
                raise CheckpointInvalidError(
                    f"step {loaded_from} in {manager.directory} was refused while loading and no older step "
                    "validates: the state dict is partly loaded from the refused step; start from a fresh state"
                )
            return None
        checkpoint = reader.checkpoint
        if callable(state_dict):
            state_dict = state_dict()
        try:
            dcp_load(state_dict, storage_reader=reader, **load_kwargs)
            return checkpoint
        except CheckpointException as error:
            invalid = [f[0] for f in error.failures.values() if isinstance(f[0], CheckpointInvalidError)]
            if not invalid:
                raise
            found = [str(failure) for failure in invalid]
        finally:
            reader.release()
        if manager.is_coordinator:
            manager._refuse(checkpoint, found)
        if step is not None:
            raise CheckpointInvalidError(
                f"checkpoint of step {step} in {manager.directory} was refused while loading (the state dict is "
                f"partly loaded from it): {'; '.join(found)}"
            )
        log.warning("step %d refused while loading; loading the newest step that validates", checkpoint.step)
        loaded_from = checkpoint.step


def make_stager(overlap: bool) -> tuple[AsyncStager, bool]:
    """The DCP stager of one in-flight save, and whether it may be reused. ``overlap``: DCP's ``DefaultStager``
    staging in a thread (on a CUDA stream of its own, into pinned memory, when CUDA is present). Else, with CUDA:
    DCP's cached pinned staging (``BlockingAsyncStager(cache_staged_state_dict=True)``: pinned buffers allocated
    at the first save, reused; a save blocks for one device-to-host copy); without CUDA a blocking
    ``DefaultStager`` (its CPU copies allocated once). A ``DefaultStager`` is made anew for each save where this
    torch cannot stage twice with one (``KeyError: <class 'type'>`` in torch 2.11)."""
    cuda = torch.cuda.is_available()
    if overlap or not cuda:
        options = StagingOptions(
            use_pinned_memory=cuda, use_shared_memory=False, use_async_staging=overlap, use_non_blocking_copy=cuda
        )
        return DefaultStager(options), _REUSABLE_DEFAULT_STAGER
    return _PinnedStager(), True


_REUSABLE_DEFAULT_STAGER = type in getattr(StateDictStager(), "_deepcopy_dispatch", {})
"""torch 2.11's DefaultStager fails its second stage (it copies ``type`` objects through a dispatch missing it)."""


class _PinnedStager(BlockingAsyncStager):
    """DCP's cached pinned staging, made again when the state's shape changes (e.g. the optimizer's state appears
    at its first step), which the cache refuses."""

    def __init__(self) -> None:
        super().__init__(cache_staged_state_dict=True)

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        try:
            return super().stage(state_dict)
        except (CompanionMismatch, RuntimeError):
            self.state_dict_cache = None
            return super().stage(state_dict)


def sync_device() -> None:
    """Wait for the kernels queued on the current CUDA stream (none without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.current_stream().synchronize()
