"""CheckpointManager validation: CRC32C in the marker, refused restores that fall back and keep the evidence,
rollback, the retention guard, promotion's verified copy, and the settings' bad values."""

from __future__ import annotations

import fcntl
import json
import logging
import os
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from ai_storage_training import CheckpointInvalidError, CheckpointManager
from ai_storage_training.checkpoint import layout
from tests.training.corruption import flip_byte
from tests.training.test_checkpoint_lock import lease, release

REFUSALS = "ai_storage_checkpoint_validation_failures_total"


def writer(payload: bytes):
    def write(directory: Path) -> None:
        (directory / "model.bin").write_bytes(payload)
        (directory / "optim").mkdir()
        (directory / "optim" / "state.bin").write_bytes(payload[::-1])

    return write


def refused(root: Path) -> list[str]:
    return sorted(p.name.split(".")[0] for p in (root / layout.REFUSED).iterdir())


def sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def test_a_flipped_byte_is_refused_with_the_file_named_and_the_previous_step_restored(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, keep=None)
    for step in (1, 2):
        manager.save(step, writer(bytes([step]) * 64))
    flip_byte(tmp_path / layout.step_dir(2) / "optim" / "state.bin", 3, 0x40)  # same size, other bytes
    before = sample(REFUSALS)
    with caplog.at_level(logging.WARNING), manager.load() as checkpoint:
        assert checkpoint is not None and checkpoint.step == 1
    assert sample(REFUSALS) == before + 1
    assert "refused checkpoint" in caplog.text and "optim/state.bin: CRC32C" in caplog.text
    assert refused(tmp_path) == ["step-00000002"]  # kept aside for inspection, not deleted
    manager.save(2, writer(b"again" * 10))  # the job trains past step 1 and saves step 2 again
    with manager.load() as checkpoint:
        assert checkpoint is not None and (checkpoint.path / "model.bin").read_bytes() == b"again" * 10


def test_a_truncated_newest_step_is_refused_on_restore_and_kept(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, keep=2)
    for step in (1, 2):
        manager.save(step, writer(b"x" * 64))
    (tmp_path / layout.step_dir(2) / "model.bin").write_bytes(b"x" * 10)
    with caplog.at_level(logging.WARNING), manager.load() as checkpoint:
        assert checkpoint is not None and checkpoint.step == 1
    assert "model.bin: 10 bytes, the marker says 64" in caplog.text
    manager.save(2, writer(b"y" * 64))
    manager.save(3, writer(b"z" * 64))
    assert refused(tmp_path) == ["step-00000002"]
    assert [c.step for c in manager.checkpoints()] == [2, 3]


def test_the_size_only_fast_path_is_explicit_and_misses_a_flip(tmp_path):
    CheckpointManager(tmp_path).save(1, writer(b"a" * 64))
    flip_byte(tmp_path / layout.step_dir(1) / "model.bin", 3, 0x40)
    with CheckpointManager(tmp_path, verify="size").load() as checkpoint:
        assert checkpoint is not None and checkpoint.step == 1  # what verify="size" trades away
    with pytest.raises(CheckpointInvalidError, match=r"model\.bin: CRC32C [0-9a-f]{8}, the marker says [0-9a-f]{8}"):
        CheckpointManager(tmp_path).validate(1)
    with pytest.raises(CheckpointInvalidError), CheckpointManager(tmp_path).load(step=1):
        pass
    assert refused(tmp_path) == ["step-00000001"]


def test_validate_names_every_differing_file_and_a_missing_step(tmp_path):
    manager = CheckpointManager(tmp_path)
    manager.save(1, writer(b"a" * 64))
    assert manager.validate(1).step == 1
    (tmp_path / layout.step_dir(1) / "model.bin").unlink()
    flip_byte(tmp_path / layout.step_dir(1) / "optim" / "state.bin", 3, 0x40)
    with pytest.raises(CheckpointInvalidError, match=r"model\.bin: No such file.*; optim/state\.bin: CRC32C"):
        manager.validate(1)
    with pytest.raises(FileNotFoundError, match="step 7"):
        manager.validate(7)


def test_a_marker_written_before_checksums_still_restores_by_size(tmp_path):
    step = tmp_path / layout.step_dir(4)
    step.mkdir()
    (step / "model.bin").write_bytes(b"old")
    (step / layout.MARKER).write_text(json.dumps({"step": 4, "files": {"model.bin": 3}}))
    with CheckpointManager(tmp_path).load() as checkpoint:
        assert checkpoint is not None and checkpoint.step == 4


def test_rollback_retires_the_newer_steps_so_they_can_be_saved_again(tmp_path):
    manager = CheckpointManager(tmp_path, keep=2)
    for step in (1, 2, 3):
        manager.save(step, writer(bytes([step]) * 8))
    with manager.load(step=2, rollback=True) as checkpoint:
        assert checkpoint is not None and checkpoint.step == 2
    assert [c.step for c in manager.checkpoints()] == [2]
    assert sorted(p.name.split(".")[0] for p in (tmp_path / layout.RETIRED).iterdir()) == ["step-00000003"]
    manager.save(3, writer(b"new" * 8))
    assert (tmp_path / layout.step_dir(3) / "model.bin").read_bytes() == b"new" * 8  # only the new run's files
    with pytest.raises(FileExistsError, match="rollback"):
        manager.save(3, writer(b"again"))
    for step in (4, 5):
        manager.save(step, writer(b"x"))
    assert manager.rollback_to(3) == [5, 4]
    assert manager.rollback_to(3) == []
    manager.save(4, writer(b"y"))
    assert len(list((tmp_path / layout.RETIRED).iterdir())) == 2  # trimmed to keep


def test_rollback_waits_for_nobody_and_fails_loudly_on_a_step_being_read(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None, timeout=0.2)
    for step in (1, 2):
        manager.save(step, writer(b"x"))
    with manager.load(step=2), pytest.raises(RuntimeError, match="step 2 stayed locked"):
        manager.rollback_to(1)
    assert [c.step for c in manager.checkpoints()] == [1, 2]


def test_retention_never_deletes_the_newest_checkpoint_that_validates(tmp_path, caplog):
    CheckpointManager(tmp_path, keep=None).save(1, writer(b"good" * 16))
    CheckpointManager(tmp_path, keep=None).save(2, writer(b"soon" * 16))
    flip_byte(tmp_path / layout.step_dir(2) / "model.bin", 3, 0x40)  # corrupted after its writer went away
    with caplog.at_level(logging.WARNING):
        assert CheckpointManager(tmp_path, keep=1).retain() == []
    assert [c.step for c in CheckpointManager(tmp_path).checkpoints()] == [1]
    assert refused(tmp_path) == ["step-00000002"] and "model.bin: CRC32C" in caplog.text


def test_save_copy_promotes_a_checkpoint_verified_against_its_marker(tmp_path):
    local, durable = CheckpointManager(tmp_path / "local"), CheckpointManager(tmp_path / "durable", keep=2)
    source = local.save(5, writer(b"w" * 100))
    copied = durable.save_copy(source.path)
    assert copied.step == 5 and durable.validate(5) == copied
    assert (copied.path / layout.MARKER).read_text() == (source.path / layout.MARKER).read_text()
    with pytest.raises(FileExistsError):
        durable.save_copy(source.path)
    bad = local.save(6, writer(b"v" * 100))
    flip_byte(bad.path / "model.bin", 3, 0x40)
    with pytest.raises(CheckpointInvalidError, match=r"model\.bin: CRC32C"):
        durable.save_copy(bad.path)
    assert sorted(p.name for p in durable.directory.iterdir()) == ["step-00000005"]  # nothing half-made


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"verify": "md5"}, "verify: expected one of crc32c, size"),
        ({"rank": -1}, "rank: expected a rank from 0"),
        ({"rank": 2, "world_size": 2, "run_id": "r"}, "rank: expected a rank from 0 to world_size - 1"),
        ({"world_size": 0}, "world_size: expected a positive number"),
        ({"run_id": "a/b"}, "run_id: expected 1-64 letters"),
        ({"timeout": 0}, "timeout: expected a positive number of seconds"),
    ],
)
def test_bad_settings_are_refused_with_their_name(tmp_path, arguments, message):
    with pytest.raises(ValueError, match=message):
        CheckpointManager(tmp_path, **arguments)
    assert list(tmp_path.iterdir()) == []


def test_several_ranks_need_a_shared_run_id(tmp_path, monkeypatch):
    monkeypatch.delenv("AI_STORAGE_RUN_ID", raising=False)
    manager = CheckpointManager(tmp_path, rank=1, world_size=2)
    with pytest.raises(ValueError, match=r"run_id: expected an id shared by every rank .*AI_STORAGE_RUN_ID"):
        manager.save(1, writer(b"x"))
    monkeypatch.setenv("AI_STORAGE_RUN_ID", "attempt-7")
    assert CheckpointManager(tmp_path, rank=1, world_size=2).run_id == "attempt-7"


def test_a_save_over_a_damaged_step_keeps_the_damaged_one_aside(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, keep=None)
    manager.save(1, writer(b"a" * 64))
    (tmp_path / layout.step_dir(1) / "model.bin").write_bytes(b"short")
    with caplog.at_level(logging.WARNING):
        manager.save(1, writer(b"b" * 64))  # the step, saved again over a truncated copy of itself
    assert (tmp_path / layout.step_dir(1) / "model.bin").read_bytes() == b"b" * 64
    garbled = tmp_path / layout.step_dir(2)
    garbled.mkdir()
    (garbled / layout.MARKER).write_text('{"step": 2, "fil')  # a marker is written atomically: this is damage
    manager.save(3, writer(b"c"))  # its clean() sets the step aside instead of deleting it
    assert refused(tmp_path) == ["step-00000001", "step-00000002"]
    assert "model.bin: 5 bytes, the marker says 64" in caplog.text and "marker is unreadable" in caplog.text


def test_a_refused_step_another_process_holds_stays_in_place_and_is_skipped(tmp_path, caplog):
    manager = CheckpointManager(tmp_path, keep=None)
    for step in (1, 2):
        manager.save(step, writer(bytes([step]) * 64))
    flip_byte(tmp_path / layout.step_dir(2) / "model.bin", 3, 0x40)
    held = os.open(tmp_path / layout.lock_file(2), os.O_RDWR | os.O_CREAT)
    fcntl.flock(held, fcntl.LOCK_SH)  # another process reads step 2
    try:
        with caplog.at_level(logging.WARNING), manager.load() as checkpoint:
            assert checkpoint is not None and checkpoint.step == 1
    finally:
        os.close(held)
    assert "left in place: another process holds its lock" in caplog.text
    assert (tmp_path / layout.step_dir(2)).exists()


def test_retention_keeps_the_older_valid_step_when_the_newer_one_is_leased_elsewhere_and_corrupt(tmp_path, caplog):
    """The case the guard exists for: step 2 is being read by another process (so it cannot be moved aside) and
    its bytes went bad after that process validated it. Retention with keep=1 would delete step 1, the only step
    that validates; it refuses step 2 (left in place, logged and counted) and keeps step 1."""
    CheckpointManager(tmp_path, keep=None).save(1, writer(b"good" * 16))
    CheckpointManager(tmp_path, keep=None).save(2, writer(b"soon" * 16))
    reader = lease(tmp_path, 2)
    try:
        flip_byte(tmp_path / layout.step_dir(2) / "model.bin", 3, 0x40)  # corrupted while another process reads it
        with caplog.at_level(logging.WARNING):
            assert CheckpointManager(tmp_path, keep=1).retain() == []
        assert [c.step for c in CheckpointManager(tmp_path).checkpoints()] == [1, 2]
        assert "model.bin: CRC32C" in caplog.text and "left in place: another process holds its lock" in caplog.text
    finally:
        release(reader)


def test_the_commit_removes_a_dead_runs_staging_of_its_step_that_clean_had_to_leave(tmp_path, monkeypatch):
    """In a multi-rank save the coordinator's clean() can meet the step's lock held by its own run's other ranks
    and leave a dead run's staging directory of that step; the commit, holding the lock alone, removes it."""
    dead = tmp_path / layout.staging_dir(1, "deadrun")
    (dead / "rank-00001").mkdir(parents=True)
    (tmp_path / layout.staging_dir(2, "deadrun")).mkdir()  # another step's: not this commit's to judge
    manager = CheckpointManager(tmp_path, keep=None)
    monkeypatch.setattr(manager, "clean", lambda saving=None: [])  # as if the lock had been held
    manager.save(1, writer(b"one"))
    assert not dead.exists() and (tmp_path / layout.staging_dir(2, "deadrun")).exists()
    assert [c.step for c in manager.checkpoints()] == [1]
