"""``python -m ai_storage_training restore-test DIR``: the newest durable checkpoint validated read-only, one JSON
line, the timestamp in a Prometheus text file on success only, exit 1 when the newest step is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ai_storage_training.checkpoint import layout
from ai_storage_training.checkpoint.manager import CheckpointManager
from tests.training.corruption import flip_byte

ROOT = Path(__file__).resolve().parents[2]
TIMESTAMP = "ai_storage_checkpoint_restore_test_timestamp_seconds"


def restore_test(*args: object) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "ai_storage_training", "restore-test", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=False,
    )
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout + proc.stderr
    return proc.returncode, json.loads(lines[0]), proc.stderr


def save(manager: CheckpointManager, step: int) -> None:
    manager.save(step, lambda d: [(d / f"shard-{i}.bin").write_bytes(bytes([step, i]) * 50_000) for i in range(3)])


def tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*")}


@pytest.fixture
def checkpoints(tmp_path):
    manager = CheckpointManager(tmp_path / "ckpt", keep=None)
    for step in (1, 2):
        save(manager, step)
    return manager


def test_the_newest_step_validates_and_the_timestamp_is_written(checkpoints, tmp_path):
    textfile = tmp_path / "restore.prom"
    before = tree(checkpoints.directory)
    status, result, stderr = restore_test(checkpoints.directory, "--textfile", textfile)
    assert status == 0 and result["status"] == "ok" and result["step"] == 2
    progress = [line for line in stderr.splitlines() if line.startswith("restore-test: ")]  # a line per 5% in a log
    assert progress and progress[-1].startswith("restore-test: 100.0% 293.0 KiB of 293.0 KiB, "), stderr
    assert result["files"] == 3 and result["bytes"] == 300_000 and result["checksums"] and result["problems"] == []
    assert tree(checkpoints.directory) == before  # nothing written or left behind
    text = textfile.read_text()
    assert f"# TYPE {TIMESTAMP} gauge" in text
    written = float(next(line.split()[1] for line in text.splitlines() if line.startswith(TIMESTAMP)))
    assert written == pytest.approx(result["timestamp"])


def test_a_flipped_byte_in_the_newest_step_fails_naming_the_file_and_keeps_the_last_timestamp(checkpoints, tmp_path):
    textfile = tmp_path / "restore.prom"
    assert restore_test(checkpoints.directory, "--textfile", textfile)[0] == 0
    kept = textfile.read_text()
    shard = checkpoints.final_path(2) / "shard-1.bin"
    flip_byte(shard, 1234)
    status, result, _ = restore_test(checkpoints.directory, "--textfile", textfile)
    assert status == 1 and result["status"] == "failed" and result["step"] == 2
    assert len(result["problems"]) == 1 and result["problems"][0].startswith("shard-1.bin: CRC32C")
    assert textfile.read_text() == kept  # the last success stays the last success
    assert checkpoints.final_path(2).exists()  # nothing moved: the test is read-only


def test_a_truncated_newest_step_is_not_skipped_for_an_older_one(checkpoints):
    os.truncate(checkpoints.final_path(2) / "shard-0.bin", 10)
    status, result, _ = restore_test(checkpoints.directory)
    assert status == 1 and result["step"] == 2 and "shard-0.bin: 10 bytes" in result["problems"][0]


def test_a_flipped_byte_in_the_newest_marker_fails_naming_the_torn_step_and_list_shows_it(checkpoints):
    marker = checkpoints.final_path(2) / layout.MARKER
    flip_byte(marker, len(marker.read_bytes()) // 2)
    status, result, _ = restore_test(checkpoints.directory)
    assert status == 1 and result["status"] == "failed" and result["step"] == 2
    assert result["problems"] == [
        f"step 2: its {layout.MARKER} marker is unreadable (torn or corrupted); the newest that validates is step 1"
    ]
    listed = subprocess.run(
        [sys.executable, "-m", "ai_storage_training", "list", str(checkpoints.directory)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    )
    rows = listed.stdout.splitlines()
    assert rows[-1].split() == ["2", "TORN:", "its", layout.MARKER, "marker", "is", "unreadable;", "not", "restorable"]
    assert rows[1].split()[0] == "1"  # the step that validates is listed as ever


def test_a_directory_without_checkpoints_fails(tmp_path):
    status, result, _ = restore_test(tmp_path)
    assert status == 1 and result["problems"] == [f"no committed checkpoint in {tmp_path}"]


def test_a_staging_directory_or_an_unmarked_step_is_not_taken_for_the_newest(checkpoints):
    (checkpoints.directory / layout.staging_dir(3, "run1")).mkdir()
    (checkpoints.directory / layout.step_dir(4)).mkdir()
    status, result, _ = restore_test(checkpoints.directory)
    assert status == 0 and result["step"] == 2


@pytest.fixture
def read_only(checkpoints, tmp_path):
    """The checkpoint directory bind-mounted read-only (as the restore-test CronJob mounts the claim)."""
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    target = tmp_path / "ro"
    target.mkdir()
    subprocess.run(["mount", "--bind", str(checkpoints.directory), str(target)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


def test_a_read_only_mount_is_tested_without_a_lock_file(read_only):
    with pytest.raises(OSError):
        (read_only / "probe").write_bytes(b"")  # really read-only, even for root
    status, result, stderr = restore_test(read_only)
    assert status == 0 and result["step"] == 2 and result["leased"] is False, stderr


def test_throughput_counts_the_reads_alone_not_importing_torch(checkpoints, monkeypatch):
    from ai_storage_training.checkpoint import restore_test as module

    checked = module._dcp_problems

    def slow_import(path, marker):  # importing torch for the metadata check takes seconds
        time.sleep(1.0)
        return checked(path, marker)

    monkeypatch.setattr(module, "_dcp_problems", slow_import)
    result = module.restore_test(checkpoints.directory)
    assert result["status"] == "ok" and result["seconds"] >= 1.0 > result["read_seconds"]
    with_the_import = result["bytes"] / 1e6 / result["seconds"]
    assert result["mb_per_s"] > 5 * with_the_import  # the bar's figure, not the whole test's
