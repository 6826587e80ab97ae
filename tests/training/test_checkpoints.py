"""CheckpointManager: complete-only loads, cleaning what crashed writers left, retention and read leases."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import crc32c
import pytest
from prometheus_client import REGISTRY

from ai_storage_training import CheckpointBusyError, CheckpointManager
from ai_storage_training.checkpoint import layout
from ai_storage_training.checkpoint.commit import read_marker
from ai_storage_training.checkpoint.manager import is_complete
from components.protection.checkpoints import offsite_script


def writer(payload: bytes):
    def write(directory: Path) -> None:
        (directory / "model.bin").write_bytes(payload)
        (directory / "optimizer").mkdir()
        (directory / "optimizer" / "state.json").write_text(json.dumps({"lr": 0.1}))

    return write


def sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_save_then_resume_returns_the_newest_complete_checkpoint_with_its_files(tmp_path):
    manager = CheckpointManager(tmp_path / "run", keep=3)
    with manager.load() as nothing:
        assert nothing is None  # a first start: nothing to resume from
    for step in (10, 20):
        manager.save(step, writer(bytes([step]) * 1000))
    with manager.load() as checkpoint:
        assert checkpoint is not None and checkpoint.step == 20
        assert (checkpoint.path / "model.bin").read_bytes() == bytes([20]) * 1000
    with manager.load(step=10) as checkpoint:
        assert checkpoint is not None and (checkpoint.path / "model.bin").read_bytes() == bytes([10]) * 1000
    with pytest.raises(FileNotFoundError, match="step 15"), manager.load(step=15):
        pass
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["step-00000010", "step-00000020"]
    marker = json.loads((tmp_path / "run" / "step-00000020" / layout.MARKER).read_text())
    model, optimizer = bytes([20]) * 1000, json.dumps({"lr": 0.1}).encode()
    own = marker.pop("crc32c")  # the marker's own CRC32C: of its JSON without it, keys sorted
    assert own == f"{crc32c.crc32c(json.dumps(marker, sort_keys=True).encode()):08x}"
    committed = datetime.fromisoformat(marker.pop("committed_at"))
    assert committed.utcoffset() == timedelta(0) and abs(datetime.now(timezone.utc) - committed) < timedelta(minutes=5)
    assert marker == {
        "format": 3,
        "step": 20,
        "run_id": manager.run_id,
        "world_size": 1,
        "files": {
            "model.bin": {"size": 1000, "crc32c": f"{crc32c.crc32c(model):08x}", "rank": 0},
            "optimizer/state.json": {"size": 11, "crc32c": f"{crc32c.crc32c(optimizer):08x}", "rank": 0},
        },
    }


def test_a_flipped_byte_in_the_marker_makes_it_unreadable_not_a_list_of_missing_files(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    manager.save(1, lambda d: (d / ".metadata").write_bytes(b"m") and None)
    manager.save(2, lambda d: (d / ".metadata").write_bytes(b"n") and None)
    marker = tmp_path / layout.step_dir(2) / layout.MARKER
    text = marker.read_text()
    marker.write_text(text.replace('".metadata"', '".meuadata"'))  # one byte, still valid JSON
    assert read_marker(marker.parent) is None  # not "step 2: .meuadata is missing"
    with manager.load() as loaded:
        assert loaded is not None and loaded.step == 1  # the torn step is passed over


def test_a_directory_without_a_valid_marker_never_counts(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    done = manager.save(1, writer(b"x" * 100))
    torn = tmp_path / "step-00000002"  # promoted by a writer that died before its marker
    torn.mkdir()
    (torn / "model.bin").write_bytes(b"y")
    truncated = manager.save(3, writer(b"z" * 100)).path
    (truncated / "model.bin").write_bytes(b"z" * 10)  # a file shorter than the marker says
    garbled = manager.save(4, writer(b"w" * 100)).path
    (garbled / layout.MARKER).write_text('{"step": 4, "fil')
    assert not is_complete(torn) and not is_complete(truncated) and not is_complete(garbled)
    assert manager.latest() == done
    assert [c.step for c in manager.checkpoints()] == [1]


def test_a_failing_write_leaves_nothing_and_counts_a_failure(tmp_path):
    manager = CheckpointManager(tmp_path, keep=2)
    failures, saves = (
        sample("ai_storage_checkpoint_save_failures_total"),
        sample("ai_storage_checkpoint_save_seconds_count"),
    )

    def broken(directory: Path) -> None:
        (directory / "half.bin").write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        manager.save(5, broken)
    assert list(tmp_path.iterdir()) == []  # no staging directory, no lock file, no step
    assert sample("ai_storage_checkpoint_save_failures_total") == failures + 1
    assert sample("ai_storage_checkpoint_save_seconds_count") == saves
    manager.save(5, writer(b"ok"))
    assert sample("ai_storage_checkpoint_save_seconds_count") == saves + 1
    with pytest.raises(FileExistsError):
        manager.save(5, writer(b"again"))
    assert sample("ai_storage_checkpoint_save_failures_total") == failures + 2


def test_restores_are_timed(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, writer(b"x"))
    before = sample("ai_storage_checkpoint_restore_seconds_count")
    with manager.load() as checkpoint:
        assert checkpoint is not None
    assert sample("ai_storage_checkpoint_restore_seconds_count") == before + 1


def test_retention_keeps_exactly_the_newest_n(tmp_path):
    manager = CheckpointManager(tmp_path, keep=3)
    for step in range(0, 80, 10):
        manager.save(step, writer(b"x"))
        assert len(manager.checkpoints()) == min(3, step // 10 + 1)
    assert [c.step for c in manager.checkpoints()] == [50, 60, 70]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000050", "step-00000060", "step-00000070"]


def test_retention_never_deletes_the_checkpoint_being_read(tmp_path):
    manager = CheckpointManager(tmp_path, keep=2)
    manager.save(1, writer(b"one"))
    with manager.load(step=1) as reading:
        assert reading is not None
        for step in (2, 3, 4):
            manager.save(step, writer(b"x"))
        assert (reading.path / "model.bin").read_bytes() == b"one"  # still there while read
        assert [c.step for c in manager.checkpoints()] == [1, 3, 4]
    manager.save(5, writer(b"x"))  # the next save's retention deletes it
    assert [c.step for c in manager.checkpoints()] == [4, 5]


def test_a_lease_held_by_another_process_also_protects_the_checkpoint(tmp_path):
    manager = CheckpointManager(tmp_path, keep=1)
    manager.save(1, writer(b"one"))
    lock = tmp_path / layout.lock_file(1)
    reader = subprocess.Popen(
        ["flock", "--shared", "--close", str(lock), "sh", "-c", "echo reading; exec sleep 30"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "reading\n"
        manager.save(2, writer(b"two"))
        assert [c.step for c in manager.checkpoints()] == [1, 2]
    finally:
        os.killpg(reader.pid, signal.SIGKILL)  # flock (holding the lock) and its command
        reader.wait()
    manager.save(3, writer(b"three"))
    assert [c.step for c in manager.checkpoints()] == [3]


def test_clean_removes_what_dead_writers_left_and_spares_a_live_writer(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    manager.save(1, writer(b"x"))
    dead = tmp_path / layout.staging_dir(2, "dead0writer")
    dead.mkdir()
    (dead / "model.bin").write_bytes(b"half")
    (tmp_path / layout.lock_file(2)).touch()  # its lock file stayed behind; nobody holds it
    unmarked = tmp_path / layout.step_dir(3)
    unmarked.mkdir()
    live = tmp_path / layout.staging_dir(4, "live0writer")
    live.mkdir()
    held = os.open(tmp_path / layout.lock_file(4), os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_EX)  # a writer still at work on step 4
    try:
        assert sorted(p.name for p in manager.clean()) == [dead.name, unmarked.name]
        assert live.exists() and not (tmp_path / layout.lock_file(2)).exists()
        with pytest.raises(CheckpointBusyError, match="step 4"):
            manager.save(4, writer(b"x"))
    finally:
        os.close(held)
    assert [p.name for p in manager.clean()] == [live.name]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000001"]


def test_a_save_over_a_torn_step_replaces_it(tmp_path):
    manager = CheckpointManager(tmp_path)
    torn = tmp_path / layout.step_dir(7)
    torn.mkdir()
    (torn / "old.bin").write_bytes(b"old")
    checkpoint = manager.save(7, writer(b"new"))
    assert sorted(p.name for p in checkpoint.path.iterdir()) == [layout.MARKER, "model.bin", "optimizer"]


@pytest.mark.parametrize("keep", [0, -1, 1.5, True, "3"])
def test_a_bad_keep_is_refused_with_its_name(tmp_path, keep):
    with pytest.raises(ValueError, match="keep: expected a positive number"):
        CheckpointManager(tmp_path, keep=keep)


def test_the_marker_name_is_reserved(tmp_path):
    manager = CheckpointManager(tmp_path)
    with pytest.raises(ValueError, match="marker name"):
        manager.save(1, lambda d: (d / layout.MARKER).write_text("mine"))
    assert manager.latest() is None


def test_the_offsite_copy_sends_exactly_the_checkpoints_the_manager_calls_complete(tmp_path):
    """The generated offsite script and the manager share one layout: a stand-in `juicefs` records the copies."""
    root = tmp_path / "checkpoints"
    manager = CheckpointManager(root, keep=None)
    manager.save(1, writer(b"x"))
    manager.save(2, writer(b"y"))
    (root / layout.step_dir(3)).mkdir()  # promoted, no marker
    (root / layout.staging_dir(4, "inflight")).mkdir()
    bin_dir, secrets = tmp_path / "bin", tmp_path / "secrets"
    bin_dir.mkdir()
    secrets.mkdir()
    (secrets / "access-key").write_text("a")
    (secrets / "secret-key").write_text("s")
    log = tmp_path / "sync.log"
    (bin_dir / "juicefs").write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    (bin_dir / "juicefs").chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CHECKPOINTS": str(root),
        "DESTINATION": "s3://b/x/",
        "SECRETS": str(secrets),
    }
    run = subprocess.run(["sh", "-c", offsite_script([])], env=env, capture_output=True, text=True, check=True)
    copied = sorted({line.split()[-1] for line in log.read_text().splitlines()})
    assert copied == ["s3://b/x/step-00000001/", "s3://b/x/step-00000002/"]
    assert "skip step-00000003" in run.stdout


def test_every_file_and_directory_is_durable_before_the_rename_and_the_marker_comes_last(tmp_path, monkeypatch):
    """The order a crash (or a power cut) relies on: fsync each file and directory, rename, fsync the parent,
    then the marker (fsynced under a temporary name, renamed, directory fsynced)."""
    events: list[tuple[str, str]] = []
    fsync, rename = os.fsync, os.rename

    def logged_fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def logged_rename(src, dst) -> None:
        events.append(("rename", f"{src} -> {dst}"))
        rename(src, dst)

    monkeypatch.setattr(os, "fsync", logged_fsync)
    monkeypatch.setattr(os, "rename", logged_rename)
    checkpoint = CheckpointManager(tmp_path).save(3, writer(b"x" * 10))
    promote = next(
        i for i, (kind, what) in enumerate(events) if kind == "rename" and what.endswith(checkpoint.path.name)
    )
    staging = events[promote][1].split(" -> ")[0]
    synced_before = {what for kind, what in events[:promote] if kind == "fsync"}
    assert {f"{staging}/model.bin", f"{staging}/optimizer/state.json", f"{staging}/optimizer", staging} <= synced_before
    marker = next(i for i, (kind, what) in enumerate(events) if kind == "rename" and what.endswith(f"/{layout.MARKER}"))
    assert promote < marker
    assert ("fsync", str(tmp_path)) in events[promote:marker]  # the rename is durable before the marker
    temporary = events[marker][1].split(" -> ")[0]
    assert ("fsync", temporary) in events[promote:marker]
    assert events[marker + 1 :] == [("fsync", str(checkpoint.path))]


def test_discard_removes_this_runs_failed_staging_directory_but_never_one_a_live_process_holds(tmp_path):
    from ai_storage_training.checkpoint.locks import lock, unlock

    manager = CheckpointManager(tmp_path, run_id="run")
    staging = manager.staging_path(4)
    (staging / "part").mkdir(parents=True)
    fd = lock(manager._lock_path(4), shared=True)  # a rank still writing into it
    assert fd is not None
    assert manager.discard(4) is False and staging.exists()
    unlock(manager._lock_path(4), fd, remove=False)
    assert manager.discard(4) is True and not staging.exists()
    assert manager.discard(4) is False  # nothing left to remove
    assert CheckpointManager(tmp_path, run_id="run", rank=1, world_size=2).discard(4) is False  # coordinator's job
