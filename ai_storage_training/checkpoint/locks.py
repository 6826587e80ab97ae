"""The locks of a checkpoint's steps: ``flock`` on one hidden lock file per step (``layout.lock_file``).

Locks are ``flock`` on one hidden lock file per step; they work across nodes on JuiceFS and CephFS. A lock file's
last holder removes it, so a process on another node (another JuiceFS client) may still hold the kernel's cached
entry of the removed file for up to the mount's ``entry-cache`` seconds: opening that entry fails with EPERM (the
inode sits in JuiceFS's trash), ENOENT or ESTALE until the entry expires (juicedata/juicefs#6593, and its docs'
cache consistency page), so :func:`lock` retries those for :data:`STALE_ENTRY_SECONDS`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from pathlib import Path

from .commit import CheckpointBusyError

STALE_ENTRY_ERRORS = (errno.EPERM, errno.ENOENT, errno.ESTALE)
"""What opening a lock file through a cached entry of a file another client removed fails with."""
STALE_ENTRY_SECONDS = 10.0
"""How long such an open is retried: longer than the cold tier's ``entry-cache`` (1 s generated)."""


def lock(path: Path, *, shared: bool) -> int | None:
    """A descriptor holding ``flock`` on ``path`` (created if missing), or None when another process holds a
    conflicting lock. A lock file that its last holder unlinked meanwhile is not the lock any more: retry."""
    while True:
        fd = _open_lock_file(path)
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


def _open_lock_file(path: Path) -> int:
    """Open (or create) the lock file, retrying a stale cached entry (see the module docstring) with a growing
    pause for up to :data:`STALE_ENTRY_SECONDS`; any other error, or a missing directory, raises at once."""
    deadline, pause = time.monotonic() + STALE_ENTRY_SECONDS, 0.02
    while True:
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:
            stale = error.errno in STALE_ENTRY_ERRORS and path.parent.is_dir()
            if not stale or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def lock_waiting(path: Path, *, shared: bool, timeout: float, what: str) -> int:
    """:func:`lock`, retried until ``timeout`` seconds; CheckpointBusyError naming ``what`` after that."""
    deadline = time.monotonic() + timeout
    while (fd := lock(path, shared=shared)) is None:
        if time.monotonic() > deadline:
            raise CheckpointBusyError(f"{what} stayed locked by another process for {timeout}s")
        time.sleep(0.05)
    return fd


def unlock(path: Path, fd: int, *, remove: bool = True) -> None:
    """Release the lock; the last holder (the one that can take it exclusively) removes the lock file, unless
    ``remove`` is False. A multi-rank save removes it only when its commit releases it, once every rank's manifest
    is in: no rank opens that lock file again, so none meets the removed file's stale cached entry on another node
    (see the module docstring). Removed while a rank sits between opening and locking it, it would be met."""
    try:
        if remove:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
