"""CheckpointManager: crash-safe saves, complete-only loads and retention of the newest N checkpoints.

A save writes into a hidden staging directory, fsyncs every file and directory in it, renames it to
``step-NNNNNNNN/``, fsyncs the parent, and writes the ``COMPLETE`` marker last (to a temporary name, fsynced,
renamed, directory fsynced). The marker lists every file and its size. A process killed at any point leaves
a staging directory or a promoted directory without a valid marker, both ignored by ``latest()`` and
``load()`` and removed by ``clean()``; never a torn checkpoint that looks complete.

Processes on a shared filesystem (JuiceFS, CephFS) coordinate with ``flock`` on one hidden lock file per step:
a writer holds it exclusively while it saves, a reader shares it while it reads, and retention or cleaning
delete a step only when they can take it exclusively, so a checkpoint being read is never deleted (retention
keeps it until a later save). A crashed process's locks go with it, so what it left is cleaned safely.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import layout, metrics

SYNC_WORKERS = 16
"""Files fsynced at once when a checkpoint is made durable."""


class CheckpointBusyError(RuntimeError):
    """Another process holds the step's lock (saving it, reading it or deleting it)."""


@dataclass(frozen=True)
class Checkpoint:
    """A complete checkpoint: its step and its directory."""

    step: int
    path: Path


def _fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: str) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _sync_tree(root: Path) -> dict[str, int]:
    """fsync every file (in parallel: on JuiceFS each fsync uploads the file's blocks), then every directory
    bottom-up; return each file's size by its path under ``root``."""
    walk = list(os.walk(root, topdown=False))
    paths = [os.path.join(directory, name) for directory, _, names in walk for name in names]
    with ThreadPoolExecutor(max_workers=SYNC_WORKERS) as pool:
        sizes = list(pool.map(_fsync_file, paths))
    for directory, _, _ in walk:
        _fsync_dir(directory)
    return {os.path.relpath(path, root): size for path, size in zip(paths, sizes, strict=True)}


def _write_marker(final: Path, step: int, files: dict[str, int]) -> None:
    temporary = final / f".{layout.MARKER}.tmp-{uuid.uuid4().hex[:12]}"
    with open(temporary, "w") as f:
        json.dump({"step": step, "files": files}, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.rename(temporary, final / layout.MARKER)
    _fsync_dir(final)


def is_complete(path: Path) -> bool:
    """True when ``path`` carries a valid marker and every file the marker lists has its size (a copy restored
    under another name counts too)."""
    try:
        marker = json.loads((path / layout.MARKER).read_text())
        return all((path / name).stat().st_size == size for name, size in marker["files"].items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def _lock(path: Path, *, shared: bool) -> int | None:
    """A descriptor holding ``flock`` on ``path`` (created if missing), or None when another process holds a
    conflicting lock. A lock file that its last holder unlinked meanwhile is not the lock any more: retry."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:
            current = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            current = False
        if current:
            return fd
        os.close(fd)


def _unlock(path: Path, fd: int) -> None:
    """Release the lock; the last holder (the one that can take it exclusively) removes the lock file."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pass
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    finally:
        os.close(fd)


class CheckpointManager:
    """Checkpoints of one training run in ``directory``, keeping the newest ``keep`` complete ones
    (``keep=None`` keeps all)."""

    def __init__(self, directory: str | os.PathLike[str], keep: int | None = 3):
        if keep is not None and (isinstance(keep, bool) or not isinstance(keep, int) or keep < 1):
            raise ValueError(f"keep: expected a positive number of checkpoints, or None to keep all; got {keep!r}")
        self.directory = Path(directory)
        self.keep = keep

    def _lock_path(self, step: int) -> Path:
        return self.directory / layout.lock_file(step)

    def checkpoints(self) -> list[Checkpoint]:
        """The complete checkpoints, oldest step first."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        found = []
        for entry in entries:
            step = layout.parse_step(entry.name)
            if step is not None and entry.is_dir() and is_complete(Path(entry.path)):
                found.append(Checkpoint(step, Path(entry.path)))
        return sorted(found, key=lambda c: c.step)

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint, or None."""
        found = self.checkpoints()
        return found[-1] if found else None

    def save(self, step: int, write: Callable[[Path], object]) -> Checkpoint:
        """Save checkpoint ``step``: ``write(directory)`` writes the job's files into a staging directory; the
        manager makes them durable, promotes them and marks them complete, then applies retention."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step: expected a non-negative integer; got {step!r}")
        started = time.monotonic()
        try:
            checkpoint = self._save(step, write)
        except Exception:
            metrics.SAVE_FAILURES.inc()
            raise
        metrics.SAVE_SECONDS.observe(time.monotonic() - started)
        self.retain()
        return checkpoint

    def _save(self, step: int, write: Callable[[Path], object]) -> Checkpoint:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.clean()
        final = self.directory / layout.step_dir(step)
        fd = _lock(self._lock_path(step), shared=False)
        if fd is None:
            raise CheckpointBusyError(
                f"step {step} in {self.directory} is being saved, read or deleted by another process"
            )
        try:
            if is_complete(final):
                raise FileExistsError(f"checkpoint {final} already exists")
            if final.exists():  # promoted by a writer that died before its marker: we hold the step's lock
                shutil.rmtree(final)
            staging = self.directory / layout.staging_dir(step, uuid.uuid4().hex[:12])
            staging.mkdir()
            try:
                write(staging)
                if (staging / layout.MARKER).exists():
                    raise ValueError(f"the checkpoint's files may not include the marker name {layout.MARKER!r}")
                files = _sync_tree(staging)
                os.rename(staging, final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            _fsync_dir(self.directory)
            _write_marker(final, step, files)
        finally:
            _unlock(self._lock_path(step), fd)
        return Checkpoint(step, final)

    @contextlib.contextmanager
    def load(self, step: int | None = None, timeout: float = 30.0) -> Iterator[Checkpoint | None]:
        """Lease a complete checkpoint (the newest, or ``step``) for reading: retention will not delete it while
        the ``with`` block runs. Yields None when there is no checkpoint to resume from (``step=None``); raises
        FileNotFoundError when ``step`` is not a complete checkpoint."""
        started = time.monotonic()
        leased = self._lease(step, timeout)
        if leased is None:
            if step is not None:
                raise FileNotFoundError(f"no complete checkpoint of step {step} in {self.directory}")
            yield None
            return
        checkpoint, fd = leased
        try:
            yield checkpoint
        finally:
            _unlock(self._lock_path(checkpoint.step), fd)
        metrics.RESTORE_SECONDS.observe(time.monotonic() - started)

    def _lease(self, step: int | None, timeout: float) -> tuple[Checkpoint, int] | None:
        deadline = time.monotonic() + timeout
        while True:
            found = [c for c in self.checkpoints() if step is None or c.step == step]
            if not found:
                return None
            wanted = found[-1]
            fd = _lock(self._lock_path(wanted.step), shared=True)
            if fd is not None:
                if is_complete(wanted.path):  # not deleted between the listing and the lock
                    return wanted, fd
                _unlock(self._lock_path(wanted.step), fd)
            elif time.monotonic() > deadline:
                raise CheckpointBusyError(f"step {wanted.step} in {self.directory} stayed locked for {timeout}s")
            time.sleep(0.05)

    def retain(self) -> list[Checkpoint]:
        """Delete complete checkpoints beyond the newest ``keep``, except those being read (a later call
        deletes them); return the deleted ones."""
        if self.keep is None:
            return []
        deleted = []
        for checkpoint in self.checkpoints()[: -self.keep]:
            lock = self._lock_path(checkpoint.step)
            fd = _lock(lock, shared=False)
            if fd is None:
                continue
            try:
                if not is_complete(checkpoint.path):  # another process deleted it since the listing
                    continue
                (checkpoint.path / layout.MARKER).unlink()  # from here on it is no checkpoint for anyone
                _fsync_dir(checkpoint.path)
                shutil.rmtree(checkpoint.path)
                deleted.append(checkpoint)
            finally:
                _unlock(lock, fd)
        return deleted

    def clean(self) -> list[Path]:
        """Remove what crashed writers left (staging directories, promoted directories without a valid marker,
        lock files nobody holds) for every step no live process holds; return the removed directories."""
        try:
            entries = list(os.scandir(self.directory))
        except FileNotFoundError:
            return []
        leftovers: dict[int, list[Path]] = {}
        for entry in entries:
            path = Path(entry.path)
            staging, promoted, lock = (
                layout.parse_staging(entry.name),
                layout.parse_step(entry.name),
                layout.parse_lock(entry.name),
            )
            if staging is not None:
                leftovers.setdefault(staging, []).append(path)
            elif promoted is not None and entry.is_dir() and not is_complete(path):
                leftovers.setdefault(promoted, []).append(path)
            elif lock is not None:
                leftovers.setdefault(lock, [])
        removed = []
        for step, paths in sorted(leftovers.items()):
            lock_path = self._lock_path(step)
            fd = _lock(lock_path, shared=False)
            if fd is None:
                continue  # a live writer or reader
            try:
                for path in paths:
                    if path.exists() and (layout.parse_staging(path.name) is not None or not is_complete(path)):
                        shutil.rmtree(path)
                        removed.append(path)
            finally:
                _unlock(lock_path, fd)
        return removed
