"""Local landing and promotion: committed local steps reach the durable directory verified and in order, a local
step leaves only once it is durable, the newest durable step survives a promoter killed at random points, and a
restore prefers a local step that validates."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from ai_storage_training.checkpoint import lag, promotion
from ai_storage_training.checkpoint.async_save import AsyncCheckpointer
from ai_storage_training.checkpoint.commit import read_marker
from ai_storage_training.checkpoint.manager import CheckpointManager
from tests.training import promoter_job
from tests.training.corruption import flip_byte

PROMOTER = Path(__file__).with_name("promoter_job.py")


def sample(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


def files(step: int, size: int = 4096) -> dict[str, bytes]:
    return {f"shard-{i}.bin": bytes([step % 251, i]) * (size // 2) for i in range(3)}


def land(manager: CheckpointManager, step: int, size: int = 4096) -> None:
    data = files(step, size)
    manager.save(step, lambda d: [(d / name).write_bytes(b) for name, b in data.items()])


@pytest.fixture
def tiers(tmp_path):
    local = CheckpointManager(tmp_path / "local", keep=None)
    durable = CheckpointManager(tmp_path / "durable", keep=3)
    tracker = lag.CheckpointLag()
    return local, durable, promotion.Promoter(local, durable, local_keep=1, lag=tracker), tracker


def steps(manager: CheckpointManager) -> list[int]:
    return [c.step for c in manager.checkpoints()]


def test_committed_local_steps_are_promoted_in_order_with_their_checksums(tiers):
    local, durable, promoter, tracker = tiers
    for step in (1, 2, 3):
        tracker.requested(step)
        land(local, step)
    seconds = sample("ai_storage_checkpoint_promotion_seconds_count")
    assert promoter.promote() == [1, 2, 3]
    assert steps(durable) == [1, 2, 3] and steps(local) == [3]  # local keeps the newest for a fast restore
    assert sample("ai_storage_checkpoint_promotion_seconds_count") - seconds == 3
    marker = read_marker(durable.final_path(3))
    assert marker is not None and all(record.crc32c is not None for record in marker.files.values())
    assert {n: (durable.final_path(3) / n).read_bytes() for n in marker.files} == files(3)
    assert tracker.steps() == 0 and tracker.in_flight() == 0
    assert promoter.promote() == []  # nothing new


def test_a_local_step_is_deleted_only_after_its_promotion_committed(tiers, monkeypatch):
    local, durable, promoter, _ = tiers
    deletions = []
    real_delete = promoter._view._delete

    def delete(checkpoint):  # at the moment a local step goes, its step (or a newer one) must be durable
        deletions.append((checkpoint.step, steps(CheckpointManager(durable.directory, keep=None))))
        return real_delete(checkpoint)

    monkeypatch.setattr(promoter._view, "_delete", delete)
    land(local, 1)
    assert promoter.promote() == [1]
    real_copy = durable.save_copy
    monkeypatch.setattr(durable, "save_copy", lambda source: (_ for _ in ()).throw(OSError(5, "Input/output error")))
    for step in (2, 3, 4):
        land(local, step)
    failures = sample("ai_storage_checkpoint_promotion_failures_total")
    assert promoter.promote() == []
    assert sample("ai_storage_checkpoint_promotion_failures_total") - failures == 1
    assert steps(local) == [2, 3, 4]  # 1 is durable and goes; none of the steps whose promotion failed
    assert [step for step, _ in deletions] == [1]
    monkeypatch.setattr(durable, "save_copy", real_copy)
    assert promoter.promote() == [2, 3, 4]
    assert [step for step, _ in deletions] == [1, 2, 3] and steps(local) == [4]
    assert all(max(durable_steps) >= step for step, durable_steps in deletions)


def test_a_corrupt_local_step_is_not_promoted_and_stays_for_inspection(tiers):
    local, durable, promoter, _ = tiers
    land(local, 1)
    flip_byte(local.final_path(1) / "shard-1.bin", mask=0xFF)
    failures = sample("ai_storage_checkpoint_promotion_failures_total")
    assert promoter.promote() == []
    assert sample("ai_storage_checkpoint_promotion_failures_total") - failures == 1
    assert steps(durable) == [] and local.final_path(1).exists()


def test_a_durable_copy_that_fails_its_read_back_is_refused_there_and_the_local_step_kept(tiers, monkeypatch):
    local, durable, promoter, _ = tiers
    land(local, 1)
    real_copy = durable.save_copy

    def copy_then_rot(source):  # the durable tier corrupts the copy after it was written
        checkpoint = real_copy(source)
        flip_byte(checkpoint.path / "shard-0.bin", mask=0xFF)
        return checkpoint

    monkeypatch.setattr(durable, "save_copy", copy_then_rot)
    assert promoter.promote() == []
    assert steps(durable) == [] and (durable.directory / ".refused").is_dir()
    assert steps(local) == [1]
    monkeypatch.setattr(durable, "save_copy", real_copy)
    assert promoter.promote() == [1]  # the next pass promotes it again


def test_the_background_thread_promotes_what_async_saves_land_and_close_flushes(tiers):
    local, durable, promoter, tracker = tiers
    promoter.start()
    with AsyncCheckpointer(local, durable=False, lag=tracker) as checkpointer:
        checkpointer.on_saved.append(promoter.wake)
        for step in (1, 2, 3, 4):
            checkpointer.save(step, files(step))
    promoter.close()
    assert steps(durable) == [2, 3, 4] and steps(local) == [4]
    assert tracker.steps() == 0 and tracker.seconds() == 0


def test_the_newest_durable_step_survives_a_promoter_killed_at_random_points(tmp_path):
    local = CheckpointManager(tmp_path / "local", keep=None)
    durable_dir = tmp_path / "durable"
    step, newest, kills, mid_copy = promoter_job.kill_at_random(
        local, durable_dir, lambda step: land(local, step, size=1024 * 1024), rounds=12, seed=26
    )
    print(f"\npromoter killed {kills} times of 12 ({mid_copy} in a copy), newest durable step {newest} of {step}")
    assert kills >= 3 and mid_copy >= 1  # the kills landed, some in the middle of a copy
    subprocess.run([sys.executable, str(PROMOTER), str(local.directory), str(durable_dir)], check=True, timeout=120)
    assert steps(CheckpointManager(durable_dir, keep=None)) == [step - 2, step - 1, step]  # it catches up
    assert steps(CheckpointManager(local.directory, keep=None)) == []


def test_a_restore_prefers_a_local_step_that_validates(tiers):
    local, durable, promoter, _ = tiers
    land(local, 1)
    promoter.promote()  # step 1: durable, and kept locally (local_keep=1)
    land(local, 2)
    assert promotion.restore_manager(local, durable) is local  # step 2 is only local
    flip_byte(local.final_path(2) / "shard-2.bin", mask=0xFF)
    assert promotion.restore_manager(local, durable) is local  # local step 1 validates and is as new as durable
    flip_byte(local.final_path(1) / "shard-0.bin", mask=0xFF)
    chosen = promotion.restore_manager(local, durable)
    assert chosen is durable  # no local step that validates: the durable one
    with chosen.load() as checkpoint:
        assert checkpoint is not None and checkpoint.step == 1
    assert promotion.restore_manager(None, durable) is durable


def test_a_local_step_older_than_the_durable_one_is_not_preferred(tmp_path):
    local = CheckpointManager(tmp_path / "local", keep=None)
    durable = CheckpointManager(tmp_path / "durable", keep=None)
    land(local, 1)
    land(durable, 2)
    assert promotion.restore_manager(local, durable) is durable


def test_managers_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(promotion.DIR_VARIABLE, str(tmp_path / "durable"))
    monkeypatch.delenv(promotion.LOCAL_DIR_VARIABLE, raising=False)
    landing, durable, promoter = promotion.managers_from_environment(keep=2)
    assert landing is durable and promoter is None and durable.keep == 2
    monkeypatch.setenv(promotion.LOCAL_DIR_VARIABLE, str(tmp_path / "local"))
    landing, durable, promoter = promotion.managers_from_environment(keep=2)
    assert landing.directory == tmp_path / "local" and landing.keep is None and promoter is not None


@pytest.mark.parametrize(
    "environment, message",
    [
        ({}, "AI_STORAGE_CHECKPOINT_DIR: expected the durable checkpoint directory"),
        (
            {"AI_STORAGE_CHECKPOINT_DIR": "SAME", "AI_STORAGE_CHECKPOINT_LOCAL_DIR": "SAME"},
            "expected a directory other",
        ),
    ],
)
def test_bad_environment_is_refused_with_the_variable_named(tmp_path, monkeypatch, environment, message):
    monkeypatch.delenv(promotion.DIR_VARIABLE, raising=False)
    monkeypatch.delenv(promotion.LOCAL_DIR_VARIABLE, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, str(tmp_path) if value == "SAME" else value)
    with pytest.raises(ValueError, match=message):
        promotion.managers_from_environment()


@pytest.mark.parametrize("value", [-1, True, "1"])
def test_a_bad_local_keep_is_refused_with_its_name(tmp_path, value):
    local, durable = CheckpointManager(tmp_path / "l", keep=None), CheckpointManager(tmp_path / "d")
    with pytest.raises(ValueError, match="local_keep: expected a non-negative number"):
        promotion.Promoter(local, durable, local_keep=value)
