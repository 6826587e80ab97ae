"""A step's lock is the lock file now at its path, not one its last holder unlinked: a process that opened the old
file just before another released (and removed) it, and locks it afterwards, holds nothing, and must not delete
a checkpoint that a third process is reading under the recreated lock file.

The interleaving is made exact by pausing the deleting process between opening the step's hidden lock file and
locking it (a wrapper around ``fcntl.flock`` in this process); the reader and the releasing process are real
separate processes using the public ``CheckpointManager.load``."""

from __future__ import annotations

import errno
import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint import layout, locks
from ai_storage_training.checkpoint.commit import read_marker
from components.toolchain.render import ROOT

LEASE = """
import sys
from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint import commit, layout
from ai_storage_training.checkpoint.commit import read_marker
with CheckpointManager(sys.argv[1], keep=None).load(step=int(sys.argv[2])) as checkpoint:
    assert checkpoint is not None
    print("leased", flush=True)
    sys.stdin.readline()  # hold the lease until told to stop
"""


def lease(directory: Path, step: int) -> subprocess.Popen[str]:
    """Another process reading checkpoint ``step`` (holding its lease) until its stdin gets a line."""
    reader = subprocess.Popen(
        [sys.executable, "-c", LEASE, str(directory), str(step)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert reader.stdout is not None and reader.stdout.readline() == "leased\n"
    return reader


def release(reader: subprocess.Popen[str]) -> None:
    reader.communicate("done\n", timeout=30)
    assert reader.returncode == 0


def write(payload: bytes):
    return lambda directory: (directory / "model.bin").write_bytes(payload)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Path]:
    """A run directory with checkpoints 1 and 2 (``keep=1`` retention would delete 1)."""
    manager = CheckpointManager(tmp_path, keep=None)
    manager.save(1, write(b"one"))
    manager.save(2, write(b"two"))
    yield tmp_path


def test_a_lock_file_unlinked_and_recreated_under_a_waiting_process_is_not_its_lock(run, monkeypatch):
    real_flock = fcntl.flock
    readers: list[subprocess.Popen[str]] = []

    def flock(fd: int, operation: int) -> None:
        path = Path(os.readlink(f"/proc/self/fd/{fd}"))
        if not readers and path == run / layout.lock_file(1) and operation & fcntl.LOCK_EX:
            # Retention, paused between opening step 1's lock file and locking it to delete the step: a process
            # leases the checkpoint and releases it (the last holder removes the lock file), then a reader leases
            # it again (a new file). Only step 1's exclusive lock: the one that guards the deletion.
            release(lease(run, 1))
            readers.append(lease(run, 1))
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    try:
        deleted = CheckpointManager(run, keep=1).retain()
        monkeypatch.undo()
        assert readers, "retention never locked step 1's lock file to delete it (test out of date?)"
        assert deleted == [], "retention deleted a checkpoint that another process is reading"
        assert [c.step for c in CheckpointManager(run, keep=None).checkpoints()] == [1, 2]
    finally:
        for reader in readers:
            release(reader)
    # once nobody reads it, retention deletes it
    assert [c.step for c in CheckpointManager(run, keep=1).retain()] == [1]


def stale_opens(monkeypatch, failures: int, code: int) -> list[str]:
    """``os.open`` of a lock file fails ``failures`` times with ``code`` (as through a stale cached entry of a
    lock file another client removed), then opens; returns the log of lock file opens."""
    real_open, opened = os.open, []

    def fake_open(path, flags, *args, **kwargs):
        if str(path).endswith(".lock"):
            opened.append(str(path))
            if len(opened) <= failures:
                raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    return opened


@pytest.mark.parametrize("code", [errno.EPERM, errno.ENOENT, errno.ESTALE])
def test_a_stale_entry_of_a_removed_lock_file_is_retried_until_it_opens(tmp_path, monkeypatch, code):
    opened = stale_opens(monkeypatch, 3, code)
    fd = locks.lock(tmp_path / ".step-00000001.lock", shared=False)
    assert fd is not None and len(opened) == 4
    locks.unlock(tmp_path / ".step-00000001.lock", fd)


def test_a_stale_entry_that_never_expires_fails_after_the_bound(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "STALE_ENTRY_SECONDS", 0.3)
    opened = stale_opens(monkeypatch, 10**6, errno.EPERM)
    started = time.monotonic()
    with pytest.raises(PermissionError):
        locks.lock(tmp_path / ".step-00000001.lock", shared=False)
    assert time.monotonic() - started < 0.3 + 1  # never sleeps past the bound (its pauses double from 0.02 s)
    assert len(opened) >= 4  # retried, with pauses of 0.02, 0.04, 0.08 s before the next would pass the bound


def test_other_errors_and_a_missing_directory_fail_at_once(tmp_path, monkeypatch):
    opened = stale_opens(monkeypatch, 1, errno.EACCES)
    with pytest.raises(PermissionError):
        locks.lock(tmp_path / ".step-00000001.lock", shared=False)
    assert len(opened) == 1
    started = time.monotonic()
    with pytest.raises(FileNotFoundError):
        locks.lock(tmp_path / "gone" / ".step-00000001.lock", shared=False)
    assert time.monotonic() - started < 1


def test_a_multi_rank_steps_lock_file_is_removed_only_once_the_step_is_committed(tmp_path, monkeypatch):
    """With a JuiceFS client per node, a lock file removed while another rank may still open it is met through
    a stale cached entry (tests/datapath/test_datapath_rank_clients.py): neither a rank's release nor the
    coordinator's clean() may remove the step's lock file before its commit. Rank 1 goes first each step, so both
    find it unheld; a dead attempt's staging directory of the step has clean() lock the step too."""
    managers = [
        CheckpointManager(tmp_path, keep=None, rank=r, world_size=2, run_id="locks", timeout=30) for r in (0, 1)
    ]
    removed: list[tuple[int, bool]] = []  # (step of the lock file, whether that step was committed then)
    real_unlink = os.unlink

    def unlink(path, *args, **kwargs):
        if (step := layout.parse_lock(Path(path).name)) is not None:
            removed.append((step, read_marker(tmp_path / layout.step_dir(step)) is not None))
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink)
    with ThreadPoolExecutor(1) as ahead:
        for step in (1, 2, 3):
            (tmp_path / layout.staging_dir(step, "dead")).mkdir()
            saved = ahead.submit(managers[1].save, step, lambda d: (d / "state").write_text("1"))
            manifest = managers[0].staging_path(step) / layout.rank_manifest(1)
            deadline = time.monotonic() + 10
            while not manifest.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            assert manifest.exists(), "rank 1 did not write its manifest"
            managers[0].save(step, lambda d: (d / "state").write_text("0"))
            assert saved.result(30).step == step
    assert {step for step, _ in removed} == {1, 2, 3}, removed  # each commit removed its step's lock file
    assert all(committed for _, committed in removed), f"a lock file was removed before its step's commit: {removed}"
    assert not any((tmp_path / layout.staging_dir(step, "dead")).exists() for step in (1, 2, 3))  # clean() ran
