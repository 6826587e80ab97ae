"""Saving through PyTorch ``torch.distributed.checkpoint`` (DCP) into the CheckpointManager.

Save (every rank; ``dcp.async_save`` the same way, with the default thread executor, or ``AsyncCheckpointer``)::

    manager = CheckpointManager(os.environ["AI_STORAGE_CHECKPOINT_DIR"], keep=3)
    dcp.save(state, storage_writer=ManagedWriter(manager, step))

Load (every rank; None when there is nothing to resume from; ``dcp_reader``, whose names are importable from here)::

    checkpoint = restore(manager, state)        # dcp.load through open_reader(), falling back past a bad step

:class:`ManagedWriter` builds on DCP's ``FileSystemWriter``: every rank writes its shard files into the step's
staging directory ``.step-NNNNNNNN.tmp-<run id>/`` (DCP fsyncs each file; a CRC32C is computed from the bytes as
they are written, by wrapping DCP's file streams), fsyncs the directories and writes the size and CRC32C of each
item it wrote (``__<rank>.items.json``: DCP's items begin and end at the stream's ``tell()``) and its rank
manifest (``ranks``). The coordinator's ``finish()`` lets DCP write ``.metadata``, checks that every file each
rank reported through torch.distributed is in that rank's manifest, and commits the step once (``COMPLETE`` last,
every file of every rank with size and CRC32C), then applies retention.

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
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import crc32c
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem, _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from .. import metrics as exported
from . import layout, ranks
from .commit import (
    FileRecord,
    SummedStream,
    crc32c_file,
    fsync_dir,
    write_json_atomically,
)
from .dcp_ranks import join
from .dcp_reader import ManagedReader, open_reader, restore
from .items import Items, items_document
from .locks import lock_waiting
from .locks import unlock as _unlock
from .records import checked_metrics

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # the manager knows nothing of DCP: this module builds on it
    from .manager import CheckpointManager

METADATA = ".metadata"
"""DCP's global plan, written by the coordinator."""
WRITER_THREADS = 8
"""DCP writer threads per rank (``thread_count``): see docs/training.md for the measurement behind it."""


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
        self.errors: list[Exception] = []
        """Each failed file's error: kept for the writer to raise on its own thread (see :meth:`create_stream`)."""
        self._mutex = threading.Lock()  # DCP writes files from several threads (thread_count)

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[io.IOBase, None, None]:
        if "w" not in mode:
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        failed: Exception | None = None
        try:  # a failure is kept, not raised: DCP's other writer threads would print it and drop the file's items
            stream = _ItemSummedStream(open(path, "wb"))  # noqa: SIM115 (closed below or by DCP)
        except OSError as error:
            stream, failed = _ItemSummedStream(io.BytesIO()), error  # written to nowhere; the writer raises it
        try:
            try:
                yield stream
            finally:
                stream.close()
        except Exception as error:
            failed = error
        if failed is not None:
            with self._mutex:
                self.errors.append(failed)
            return
        stream.tell()  # the last item
        with self._mutex:
            self.records[Path(path).name] = FileRecord(stream.size, stream.crc32c)
            self.items[Path(path).name] = stream.items

    def raise_first(self) -> None:
        """Raise the first write failure :meth:`create_stream` kept."""
        if self.errors:
            raise self.errors[0]

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


class ManagedWriter(FileSystemWriter):
    """A DCP storage writer committing ``step`` through ``manager`` (see the module docstring). ``options`` go to
    ``FileSystemWriter`` (``thread_count``, ``single_file_per_rank``, ...); files are always fsynced."""

    def __init__(
        self, manager: CheckpointManager, step: int, *, metrics: Mapping[str, float] | None = None, **options: Any
    ):
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected a non-negative integer; got {step!r}")
        self.metrics = checked_metrics(metrics)
        if "sync_files" in options or "overwrite" in options:
            raise ValueError("sync_files/overwrite: the manager always fsyncs and never overwrites a committed step")
        join(manager)
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
            self._check_written(plan, future.value())
            files = {n: FileRecord(r.size, r.crc32c, manager.rank) for n, r in self.summing.records.items()}
            items_file = staging / layout.item_checksums(manager.rank)
            write_json_atomically(items_file, items_document(self.summing.written_items(future.value())))
            record = crc32c_file(items_file)
            files[items_file.name] = FileRecord(record.size, record.crc32c, manager.rank)
            fsync_dir(staging)
            fsync_dir(manager.directory)
            ranks.write_manifest(staging, rank=manager.rank, run_id=manager.run_id, step=self.step, files=files)
        except BaseException:
            exported.SAVE_FAILURES.inc()
            self._release()
            raise
        if not manager.is_coordinator:
            self._release()
            node = manager.node_ranks
            if node is not None and manager.rank == node.start:  # a node's landing directory: its first rank
                try:  # commits its ranks' files (rank 0's node: in finish)
                    self._commit(staging, node, [])
                except BaseException:
                    exported.SAVE_FAILURES.inc()
                    raise
        return future

    def _check_written(self, plan: SavePlan, results: list[WriteResult]) -> None:
        """Raise the first file's write failure; refuse a result that lacks a planned item (it would commit a step
        without it)."""
        self.summing.raise_first()
        if missing := {item.index for item in plan.items} - {result.index for result in results}:
            raise RuntimeError(f"{len(missing)} planned item(s) not written, e.g. {min(missing, key=str)}")

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        manager, staging = self.manager, Path(self.path)
        try:
            super().finish(metadata, results)  # .metadata: temporary name, fsynced, renamed
            self.summing.raise_first()
            fsync_dir(staging)
            self._release()
            self._commit(staging, manager.node_ranks or range(manager.world_size), results)
        except BaseException:
            exported.SAVE_FAILURES.inc()
            raise
        finally:
            self._release()
        exported.SAVE_SECONDS.observe(time.monotonic() - self._started)
        manager.retain()

    def _commit(self, staging: Path, sharing: range, results: list[list[WriteResult]]) -> None:
        """Commit the files of the ranks ``sharing`` the directory once each one's manifest is in (the coordinator
        adds DCP's ``.metadata``, and checks every file ``results`` reported of those ranks is in one)."""
        manager = self.manager
        files = ranks.wait_for_manifests(
            staging, world_size=manager.world_size, run_id=manager.run_id, timeout=manager.timeout, ranks=sharing
        )
        if manager.is_coordinator:
            reported = {wr.storage_data.relative_path for r in sharing for wr in results[r]}
            if missing := sorted(reported - set(files)):
                raise RuntimeError(f"{staging.name}: files reported by the ranks but in no manifest: {missing}")
            files[METADATA] = crc32c_file(staging / METADATA)  # rank 0's
        manager.commit(self.step, staging, files, metrics=self.metrics)

    def _release(self) -> None:
        if self._fd is not None:
            _unlock(self.manager._lock_path(self.step), self._fd, remove=self.manager.world_size == 1)
            self._fd = None


__all__ = ["METADATA", "WRITER_THREADS", "ManagedReader", "ManagedWriter", "open_reader", "restore"]
