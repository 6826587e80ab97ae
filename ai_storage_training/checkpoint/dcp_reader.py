"""Loading a checkpoint through PyTorch DCP: the leased, verifying storage reader and :func:`restore`.

Rank 0 chooses the newest checkpoint whose files have their sizes and whose small files (``.metadata``, the items
files, any file no items file covers) validate, refusing and setting aside the others, and broadcasts its step;
every rank leases it until its data is read and verifies each item's CRC32C as it reads it: torch.load reads the
item's bytes straight from the file into the tensor's storage, checksummed in file order chunk by chunk while they
are in the CPU's cache, so every byte is read once and copied once, as in a plain DCP load; an item is checked
before DCP copies what was read from it into the state. :func:`restore` is the load a job calls: an item that
fails its check refuses the step and the load starts again from the newest step that validates, so the state
never stays partly loaded from a refused step without an error saying so. Resharding (saved on N ranks, loaded on
M) works as in DCP.
"""

from __future__ import annotations

import inspect
import logging
import os
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any, cast

import torch.distributed as dist
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint import load as dcp_load
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner
from torch.futures import Future

from .. import metrics
from . import layout
from .checked_item import CHUNK, CheckedItem
from .commit import CheckpointInvalidError, read_marker
from .dcp_ranks import join
from .items import Items, item_records
from .locks import unlock as _unlock

if TYPE_CHECKING:
    from .manager import Checkpoint, CheckpointManager

log = logging.getLogger(__name__)

REQUIRE_VARIABLE = "AI_STORAGE_REQUIRE_CHECKPOINT"
"""Set to 1: :func:`restore` fails when there is no checkpoint to resume from (an unmounted volume, a typo)."""


class ManagedReader(FileSystemReader):
    """A DCP storage reader of one checkpoint, leased until :meth:`read_data` is done (or :meth:`release`).
    ``checkpoint`` says which step it is. Each item is read once and checked against its CRC32C as it is read
    (``verify_items``: the manager's ``verify`` is ``"crc32c"``); a mismatch raises CheckpointInvalidError.
    ``extension_registry``: DCP's ``ExtensionRegistry`` holding the stream extensions the writer was given
    (``_extensions=``) beyond the built-in ZStandard; the CRC32C is of the bytes on disk, before they are undone."""

    def __init__(self, manager: CheckpointManager, checkpoint: Checkpoint, fd: int, extension_registry: Any = None):
        super().__init__(checkpoint.path, _extension_registry=extension_registry)
        self.manager, self.checkpoint = manager, checkpoint
        self._fd: int | None = fd
        self._started = time.monotonic()
        self.verify_items = manager.verify == "crc32c"
        self.refused = False
        self._scratch = bytearray()
        self._pending: CheckedItem | None = None
        self.items: Items = {}
        if self.verify_items:
            marker = read_marker(checkpoint.path)
            try:
                self.items = item_records(checkpoint.path, marker.files) if marker is not None else {}
            except (OSError, ValueError, KeyError, TypeError) as error:
                self.release()
                problem = f"{checkpoint.path}: its item checksums are unreadable: {error}"
                raise CheckpointInvalidError(problem) from error

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        if checkpoint_id:
            raise ValueError("checkpoint_id: the manager chooses the checkpoint; pass only storage_reader=")
        super().reset(None)

    def _slice_file(self, file: Any, sinfo: _StorageInfo) -> IO[bytes]:
        """The item as torch.load reads it, checked against its CRC32C before DCP uses what was read (files no
        items file covers were checked whole when the step was chosen)."""
        self._check_pending()
        expected = self.items.get(sinfo.relative_path, {}).get(sinfo.offset) if self.verify_items else None
        if expected is None:
            return super()._slice_file(file, sinfo)
        self._pending = CheckedItem(self, file.fileno(), sinfo, expected)
        return cast(IO[bytes], self._pending)

    def _check_pending(self) -> None:
        """Check the item read last (before DCP copies it into the state, or reads the next one)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            with pending:
                pending.check()

    def scratch(self) -> memoryview:
        """One buffer of CHUNK bytes for the gaps every item checks (allocated once)."""
        if not self._scratch:
            self._scratch = bytearray(CHUNK)
        return memoryview(self._scratch)

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        try:
            future = super().read_data(plan, cast(LoadPlanner, _CheckingPlanner(planner, self._check_pending)))
            self._check_pending()
            return future
        except Exception:
            self._check_pending()  # torch.load failed on an item: refused when its bytes are not the written ones
            raise
        finally:
            if self._pending is not None:
                self._pending.close()
            self._pending = None
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
                metrics.observe_restore(time.monotonic() - self._started)


class _CheckingPlanner:
    """DCP's load planner, checking the item read last before a tensor or object read from it enters the state."""

    def __init__(self, planner: LoadPlanner, check: Callable[[], None]):
        self._planner, self._check = planner, check

    def resolve_tensor(self, read_item: Any) -> Any:
        self._check()
        return self._planner.resolve_tensor(read_item)

    def load_bytes(self, read_item: Any, value: Any) -> None:
        self._check()
        self._planner.load_bytes(read_item, value)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._planner, name)


def open_reader(
    manager: CheckpointManager,
    step: int | None = None,
    *,
    rollback: bool = False,
    timeout: float = 30.0,
    require: bool = False,
    extension_registry: Any = None,
) -> ManagedReader | None:
    """Rank 0 chooses (validates, refuses, falls back; with ``rollback`` retires newer steps) and broadcasts the
    step; every rank leases it. None on every rank when there is nothing to resume from (logged once, naming the
    directory and whether it exists); ``require`` (or ``$AI_STORAGE_REQUIRE_CHECKPOINT=1``) raises instead."""
    join(manager)
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
        _nothing_to_resume(manager, require)
        return None
    if leased is None:
        leased = manager._lease_step(decision, timeout, verify="size")  # rank 0 validated it
    return None if leased is None else ManagedReader(manager, *leased, extension_registry=extension_registry)


def _nothing_to_resume(manager: CheckpointManager, require: bool) -> None:
    """Say once (rank 0) that there is no checkpoint, and why that may be; raise when one is required."""
    directory = manager.directory
    why = "exists but holds no committed checkpoint" if directory.is_dir() else "does not exist"
    refused = directory / layout.REFUSED
    count = sum(1 for p in refused.iterdir() if p.is_dir()) if refused.is_dir() else 0
    if count:
        why += (
            f"; {count} checkpoint(s) refused by earlier restores are kept in {refused} (what differs: "
            f"python -m ai_storage_training doctor DATA --checkpoints {directory}); to stop instead of training from "
            f"the beginning, pass require=True or set ${REQUIRE_VARIABLE}=1"
        )
    required = require or os.environ.get(REQUIRE_VARIABLE, "") not in ("", "0")
    if required:
        raise FileNotFoundError(
            f"no checkpoint to resume from: {directory} {why} (a checkpoint is required: require=True or "
            f"${REQUIRE_VARIABLE}=1); is the volume mounted at that path?"
        )
    if manager.is_coordinator:
        log.warning("no checkpoint to resume from: %s %s; starting from the beginning", directory, why)


def _refuse_unknown_extension(error: CheckpointException, checkpoint: Checkpoint, manager: CheckpointManager) -> None:
    """A load that failed on a stream extension the reader's registry lacks: say which and how to give it."""
    unknown = [str(f[0]) for f in error.failures.values() if str(f[0]).startswith("Unknown extension")]
    if unknown:
        raise ValueError(
            f"extension_registry: step {checkpoint.step} in {manager.directory} was written with a stream "
            f"extension this reader does not know ({unknown[0]}); pass extension_registry= with its class "
            "registered (torch.distributed.checkpoint._extension.ExtensionRegistry().register(...))"
        ) from error


def restore(
    manager: CheckpointManager,
    state_dict: dict[str, Any] | Callable[..., dict[str, Any]],
    *,
    step: int | None = None,
    rollback: bool = False,
    require: bool = False,
    extension_registry: Any = None,
    **load_kwargs: Any,
) -> Checkpoint | None:
    """``dcp.load(state_dict, storage_reader=open_reader(manager, ...))`` on every rank; returns the checkpoint loaded,
    or None when there is nothing to resume from (``require`` raises then). An item found corrupt while reading
    refuses the step (moved to ``.refused/``) and the load starts again from the newest step that validates, which
    overwrites everything the refused one had loaded; with ``step`` given, or no older step left,
    CheckpointInvalidError says the state is partly loaded. ``state_dict`` may be a function making it, called
    once there is a checkpoint to load, with that Checkpoint when it takes an argument (its marker says the world
    size it was saved on; DCP's ``get_state_dict`` initializes an optimizer's empty state).
    ``extension_registry``: as for :class:`ManagedReader` (a checkpoint saved with custom ``_extensions``)."""
    loaded_from: int | None = None
    while True:
        reader = open_reader(
            manager,
            step,
            rollback=rollback,
            require=require and loaded_from is None,
            extension_registry=extension_registry,
        )
        if reader is None:
            if loaded_from is not None:
                raise CheckpointInvalidError(
                    f"step {loaded_from} in {manager.directory} was refused while loading and no older step "
                    "validates: the state dict is partly loaded from the refused step; start from a fresh state"
                )
            return None
        checkpoint = reader.checkpoint
        if callable(state_dict):
            takes = len(inspect.signature(state_dict).parameters)
            state_dict = state_dict(checkpoint) if takes else state_dict()
        try:
            dcp_load(state_dict, storage_reader=reader, **load_kwargs)
            return checkpoint
        except CheckpointException as error:
            invalid = [f[0] for f in error.failures.values() if isinstance(f[0], CheckpointInvalidError)]
            _refuse_unknown_extension(error, checkpoint, manager)
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
