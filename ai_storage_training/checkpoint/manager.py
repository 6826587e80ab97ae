"""CheckpointManager: crash-safe saves of one or many ranks, validated loads, rollback and guarded retention.

API (what the async layer, promotion and DCP build on)::

    manager = CheckpointManager(directory, keep=3, rank=0, world_size=1, run_id=None, verify="crc32c", timeout=600)
    manager.save(step, write)      # write(dir) writes the files; durable + committed on return -> Checkpoint
    with manager.load(step=None, rollback=False) as checkpoint: ...   # validated, leased; None on a first start
    manager.latest() / checkpoints()   # committed steps whose files have their sizes (no checksum read)
    manager.validate(step)         # CheckpointInvalidError naming each differing file
    manager.rollback_to(step)      # retire every newer step so the job can save them again
    manager.save_copy(source_dir)  # promotion: copy a committed checkpoint here, verified against its marker
    # torch.distributed.checkpoint builds on it, the manager knowing nothing of it: dcp.ManagedWriter(manager,
    # step), dcp_reader.open_reader(manager) / restore(manager, state)
    manager.staging_path(step) + commit(step, staging, files)   # commit files made durable elsewhere (records:
                                   # commit.sync_tree / copy_file / crc32c_file); read_marker, problems: commit.py

A save writes into a hidden staging directory, fsyncs every file and directory, renames it to ``step-NNNNNNNN/``,
fsyncs the parent and writes ``COMPLETE`` last, listing every file with its size and CRC32C (``commit``). With
``world_size > 1`` every rank writes its files into ``rank-RRRRR/`` of the step's shared staging directory and
rank 0 commits once all are durable (``ranks``: the file-based protocol). A process killed at any point leaves
a staging directory or a ``step-*`` directory without a marker: never listed, removed by ``clean()``.

A load validates before it trusts (every byte's CRC32C, or sizes only with ``verify="size"``), and on a mismatch
logs which file differs, counts ``ai_storage_checkpoint_validation_failures_total``, moves the step aside to
``.refused/`` and falls back to the newest step that validates. Retention keeps the newest ``keep`` steps, never
one being read (``flock`` leases) and never the newest checkpoint that validates.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import metrics as exported
from . import layout, ranks
from .commit import (
    CheckpointBusyError,
    CheckpointInvalidError,
    FileRecord,
    Marker,
    copy_file,
    fsync_dir,
    is_complete,
    problems,
    read_marker,
    sync_tree,
    write_marker,
)
from .locks import lock as _lock
from .locks import lock_waiting
from .locks import unlock as _unlock
from .records import checked_metrics
from .store import Checkpoint, CheckpointStore, _check_int

__all__ = ["Checkpoint", "CheckpointBusyError", "CheckpointInvalidError", "CheckpointManager", "is_complete"]


class CheckpointManager(CheckpointStore):
    """Checkpoints of one training run: see the module docstring and :class:`CheckpointStore` for the settings."""

    def save(
        self, step: int, write: Callable[[Path], object], *, metrics: Mapping[str, float] | None = None
    ) -> Checkpoint:
        """Save checkpoint ``step``: ``write(directory)`` writes this rank's files into a staging directory; the
        manager makes them durable and (on the coordinator, once every rank's are) commits them, with ``metrics``
        (the coordinator's: loss, tokens seen, ...) in the marker, then applies retention. Returns once the step
        is committed, on every rank."""
        _check_int("step", step, 0, "a non-negative integer")
        recorded = checked_metrics(metrics)
        started = time.monotonic()
        try:
            checkpoint = self._save(step, write, recorded)
        except Exception:
            exported.SAVE_FAILURES.inc()
            raise
        exported.SAVE_SECONDS.observe(time.monotonic() - started)
        if self.is_coordinator:
            self.retain()
        return checkpoint

    def _save(self, step: int, write: Callable[[Path], object], recorded: dict[str, float]) -> Checkpoint:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.is_coordinator:
            self.clean(saving=step)
        if self.world_size > 1:  # shared with the other ranks; waits out an exclusive holder (clean, retention)
            fd: int | None = lock_waiting(self._lock_path(step), shared=True, timeout=self.timeout, what=f"step {step}")
        else:
            fd = _lock(self._lock_path(step), shared=False)
        if fd is None:
            raise CheckpointBusyError(f"step {step} in {self.directory} is being saved, read or deleted elsewhere")
        staging = self.staging_path(step)
        try:
            self._check_new(step, held=self.world_size == 1)  # a shared lock: the commit checks again
            mine = staging / layout.rank_dir(self.rank) if self.world_size > 1 else staging
            with contextlib.suppress(FileNotFoundError):
                (staging / layout.rank_manifest(self.rank)).unlink()  # a manifest of this rank from before
            shutil.rmtree(mine, ignore_errors=True)
            mine.mkdir(parents=True)
            write(mine)
            if (staging / layout.MARKER).exists():
                raise ValueError(f"the checkpoint's files may not include the marker name {layout.MARKER!r}")
            prefix = f"{layout.rank_dir(self.rank)}/" if self.world_size > 1 else ""
            files = {prefix + n: r for n, r in sync_tree(mine, rank=self.rank).items()}
            fsync_dir(staging)
            fsync_dir(self.directory)
            if self.world_size == 1:
                return self._commit_locked(step, staging, files, metrics=recorded)
            ranks.write_manifest(staging, rank=self.rank, run_id=self.run_id, step=step, files=files)
        except BaseException as error:
            if self.world_size == 1:
                shutil.rmtree(staging, ignore_errors=True)
            else:
                ranks.abort(staging, f"rank {self.rank} failed: {error!r}")
            raise
        finally:
            _unlock(self._lock_path(step), fd, remove=self.world_size == 1)
        if not self.is_coordinator:
            ranks.wait_for_commit(self.final_path(step), staging, run_id=self.run_id, timeout=self.timeout)
            return Checkpoint(step, self.final_path(step))
        files = ranks.wait_for_manifests(staging, world_size=self.world_size, run_id=self.run_id, timeout=self.timeout)
        return self.commit(step, staging, files, metrics=recorded)

    def commit(
        self,
        step: int,
        staging: Path,
        files: dict[str, FileRecord],
        *,
        run_id: str | None = None,
        metrics: Mapping[str, float] | None = None,
    ) -> Checkpoint:
        """Commit the durable staging directory ``staging`` as ``step`` (coordinator only): its files are ``files``
        (every rank's, with sizes and CRC32C), ``metrics`` recorded in the marker. Takes the step's lock
        exclusively, waiting up to ``timeout``."""
        fd = None
        try:  # a lock that cannot be taken fails the commit too: the other ranks hear it at once
            fd = lock_waiting(self._lock_path(step), shared=False, timeout=self.timeout, what=f"step {step}")
            self._check_new(step, held=True)
            return self._commit_locked(step, staging, files, run_id=run_id, metrics=checked_metrics(metrics))
        except BaseException as error:
            ranks.abort(staging, f"the commit failed: {error!r}")
            raise
        finally:
            if fd is not None:
                _unlock(self._lock_path(step), fd)

    def _commit_locked(
        self,
        step: int,
        staging: Path,
        files: dict[str, FileRecord],
        *,
        run_id: str | None = None,
        metrics: dict[str, float] | None = None,
        committed_at: str = "",
    ) -> Checkpoint:
        wrong = [
            f"{name}: missing or not {r.size} bytes" for name, r in files.items() if _size(staging / name) != r.size
        ]
        if wrong:
            raise CheckpointInvalidError(f"{staging.name} does not hold what its ranks reported: {'; '.join(wrong)}")
        for rank in range(self.world_size):
            with contextlib.suppress(FileNotFoundError):
                (staging / layout.rank_manifest(rank)).unlink()
        final = self.final_path(step)
        os.rename(staging, final)
        fsync_dir(self.directory)
        marker = Marker(step, files, run_id or self.run_id, self.world_size, committed_at, metrics or {})
        write_marker(final, marker)
        self._trusted.add((step, marker.run_id))
        self._drop_other_stagings(step)
        return Checkpoint(step, final)

    def _drop_other_stagings(self, step: int) -> None:
        """With ``step``'s lock held exclusively and the step committed: another run's staging directory of the
        step is dead (no writer holds the lock; its commit could only fail now). ``clean()`` before the save may
        have had to leave it: this run's other ranks held the step's lock by then."""
        for name in os.listdir(self.directory):
            if layout.parse_staging(name) == step and layout.staging_run(name) not in (self._run_id, None):
                shutil.rmtree(self.directory / name, ignore_errors=True)

    @contextlib.contextmanager
    def load(
        self, step: int | None = None, timeout: float = 30.0, rollback: bool = False
    ) -> Iterator[Checkpoint | None]:
        """Lease the newest checkpoint that validates (or ``step``) for the ``with`` block; retention will not
        delete it meanwhile. Refused steps are moved to ``.refused/``. Yields None when there is nothing to resume
        from (``step=None``); raises FileNotFoundError (no such step) or CheckpointInvalidError (``step`` refused).
        ``rollback=True`` retires every newer step so the job can save those steps again."""
        started = time.monotonic()
        leased = self._lease(step, timeout)
        if leased is None:
            if step is not None:
                raise FileNotFoundError(f"no committed checkpoint of step {step} in {self.directory}")
            yield None
            return
        checkpoint, fd = leased
        try:
            if rollback:
                self.rollback_to(checkpoint.step)
            yield checkpoint
        finally:
            _unlock(self._lock_path(checkpoint.step), fd)
        exported.observe_restore(time.monotonic() - started)

    def _lease(self, step: int | None, timeout: float) -> tuple[Checkpoint, int] | None:
        if self.world_size > 1 and not self.is_coordinator:  # the coordinator chose and validated the step
            chosen = ranks.wait_for_resume(self.directory, self.run_id, self.timeout)
            return None if chosen is None else self._lease_step(chosen, timeout, verify="size")
        try:
            leased = self._choose(step, timeout)
        except Exception as error:
            if self.world_size > 1:
                ranks.publish_resume(self.directory, self.run_id, None, error=str(error))
            raise
        if self.world_size > 1:
            ranks.publish_resume(self.directory, self.run_id, leased[0].step if leased else None)
        return leased

    def _choose(self, step: int | None, timeout: float, verify: str | None = None) -> tuple[Checkpoint, int] | None:
        """The coordinator's choice: the newest step (or ``step``) that validates (``verify``, default the
        manager's), leased; refused ones set aside."""
        leased, tried = None, set()
        while leased is None:
            found = [c for c, _ in self._committed() if (step is None or c.step == step) and c.step not in tried]
            if not found:
                break
            tried.add(found[-1].step)  # a refused step another process holds stays in place: not tried twice
            leased = self._lease_step(found[-1].step, timeout, verify=verify or self.verify, refuse=True)
            if leased is None and step is not None:
                raise CheckpointInvalidError(f"checkpoint of step {step} in {self.directory} was refused (see log)")
        return leased

    def _lease_step(
        self, step: int, timeout: float, *, verify: str, refuse: bool = False
    ) -> tuple[Checkpoint, int] | None:
        """A shared lock on ``step`` once it validated; None (after refusing it when ``refuse``) otherwise."""
        checkpoint = Checkpoint(step, self.final_path(step))
        fd = lock_waiting(self._lock_path(step), shared=True, timeout=timeout, what=f"step {step} in {self.directory}")
        marker = read_marker(checkpoint.path)
        if marker is None:  # deleted between the listing and the lock
            _unlock(self._lock_path(step), fd)
            if refuse:
                return None
            raise FileNotFoundError(f"checkpoint {checkpoint.path} is gone")
        found = problems(checkpoint.path, marker, verify=verify)  # a restore always reads: no trust by memory
        if not found:
            self._trusted.add((step, marker.run_id))
            return checkpoint, fd
        _unlock(self._lock_path(step), fd)
        if not refuse:
            raise CheckpointInvalidError(f"{checkpoint.path}: {'; '.join(found)}")
        self._refuse(checkpoint, found)
        return None

    def validate(self, step: int) -> Checkpoint:
        """Check every file of ``step`` against its marker (``verify``); CheckpointInvalidError names each file
        that differs, FileNotFoundError when ``step`` has no marker. Nothing is moved."""
        path = self.final_path(step)
        marker = read_marker(path)
        if marker is None:
            raise FileNotFoundError(f"no committed checkpoint of step {step} in {self.directory}")
        found = problems(path, marker, verify=self.verify)
        if found:
            raise CheckpointInvalidError(f"{path}: {'; '.join(found)}")
        return Checkpoint(step, path)

    def save_copy(self, source: str | os.PathLike[str]) -> Checkpoint:
        """Promotion's commit: copy the committed checkpoint directory ``source`` (another manager's) into this
        directory under its step, computing each file's CRC32C while copying and comparing it with the source's
        marker (CheckpointInvalidError naming the file), fsync everything, commit with the source's records (its
        run id and ranks), then apply retention. FileExistsError when the step is already committed here."""
        source = Path(source)
        marker = read_marker(source)
        if marker is None:
            raise CheckpointInvalidError(f"{source}: no readable {layout.MARKER} marker")
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = _lock(self._lock_path(marker.step), shared=False)
        if fd is None:
            raise CheckpointBusyError(
                f"step {marker.step} in {self.directory} is being saved, read or deleted elsewhere"
            )
        staging = self.directory / layout.staging_dir(marker.step, uuid.uuid4().hex)
        try:
            self._check_new(marker.step, held=True)
            staging.mkdir()
            with ThreadPoolExecutor(max_workers=8) as pool:
                copied = pool.map(lambda item: copy_checked(source, staging, *item), marker.files.items())
                found = [p for p in copied if p]
            if found:
                raise CheckpointInvalidError(f"{source}: {'; '.join(found)}")
            sync_tree(staging, checksum=False)
            fsync_dir(self.directory)
            checkpoint = self._commit_locked(  # the source's records: when the step was taken, its metrics
                marker.step, staging, marker.files, run_id=marker.run_id, metrics=marker.metrics,
                committed_at=marker.committed_at,
            )  # fmt: skip
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        finally:
            _unlock(self._lock_path(marker.step), fd)
        self.retain()
        return checkpoint


def copy_checked(source: Path, staging: Path, name: str, expected: FileRecord) -> str | None:
    """Copy ``name`` from the checkpoint ``source`` into ``staging`` (a new file); what differs from ``expected``
    (its marker's record), or None."""
    (staging / name).parent.mkdir(parents=True, exist_ok=True)
    got = copy_file(source / name, staging / name)
    if got.size != expected.size:
        return f"{name}: {got.size} bytes, the marker says {expected.size}"
    if expected.crc32c is not None and got.crc32c != expected.crc32c:
        return f"{name}: CRC32C {got.crc32c:08x}, the marker says {expected.crc32c:08x}"
    return None


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
