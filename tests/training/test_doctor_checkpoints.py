"""The doctor reads a job's real checkpoint directory (``--checkpoints``): committed steps that validate, a
flipped byte or a cut file (critical), torn, refused, unchecksummed and leftover entries (warnings); read-only."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint import layout
from ai_storage_training.checkpoint.commit import FileRecord, Marker, write_marker
from ai_storage_training.doctor.checkpoints import findings, inspect
from tests.training.conftest import beyond_progress
from tests.training.corruption import flip_byte

HOUR = 3600


def save_steps(directory: Path, *steps: int) -> CheckpointManager:
    manager = CheckpointManager(directory, keep=None)
    for step in steps:
        manager.save(step, lambda d, step=step: (d / "model.bin").write_bytes(bytes([step]) * 50_000))
    return manager


def age(path: Path, seconds: float) -> None:
    """Make ``path`` and everything under it look untouched for ``seconds``."""
    then = time.time() - seconds
    for p in [path, *path.rglob("*")]:
        os.utime(p, (then, then))


def snapshot(root: Path) -> dict[str, str]:
    """``root`` and every entry under it with its content's digest and its modification time (a lock file made
    and removed again changes its directory's)."""
    return {
        str(p.relative_to(root)): f"{hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else 'dir'}"
        f":{p.stat().st_mtime_ns}"
        for p in [root, *root.rglob("*")]
    }


def checks(state: dict) -> dict[str, dict]:
    return {f["check"]: f for f in findings(state)}


def test_a_healthy_directory_is_ok_and_left_exactly_as_it_was(tmp_path):
    directory = tmp_path / "run"
    save_steps(directory, 10, 20, 30)
    before = snapshot(directory)
    state = inspect(directory)
    assert [c["step"] for c in state["committed"]] == [10, 20, 30] and state["newest_valid_step"] == 30
    assert all(c["checksums"] and c["problems"] == [] for c in state["committed"])
    assert findings(state) == []
    assert snapshot(directory) == before  # nothing read-only checked changed, no lock file made


@pytest.mark.parametrize("verify", ["crc32c", "size"])
def test_a_byte_flipped_in_a_committed_step_is_critical_unless_only_sizes_are_checked(tmp_path, verify):
    directory = tmp_path / "run"
    save_steps(directory, 10, 20)
    flip_byte(directory / layout.step_dir(20) / "model.bin")
    state = inspect(directory, verify=verify)
    if verify == "size":  # the explicit fast path: sizes only, so a flipped byte passes
        assert findings(state) == [] and state["newest_valid_step"] == 20
        return
    assert state["newest_valid_step"] == 10
    corrupt = checks(state)["checkpoint_corrupt"]
    assert corrupt["status"] == "critical" and "step-00000020: model.bin: CRC32C" in corrupt["detail"]


def test_a_cut_file_is_critical_even_when_only_sizes_are_checked(tmp_path):
    directory = tmp_path / "run"
    save_steps(directory, 10)
    with open(directory / layout.step_dir(10) / "model.bin", "r+b") as f:
        f.truncate(1000)
    found = checks(inspect(directory, verify="size"))
    assert found["checkpoint_corrupt"]["status"] == "critical" and "1000 bytes" in found["checkpoint_corrupt"]["detail"]
    assert found["checkpoint_none_valid"]["status"] == "critical"  # nothing left to resume from


def test_torn_refused_unchecksummed_and_stale_entries_are_warnings(tmp_path):
    directory = tmp_path / "run"
    save_steps(directory, 10, 20)
    flip_byte(directory / layout.step_dir(20) / "model.bin")
    with CheckpointManager(directory).load() as checkpoint:  # a restart refuses step 20 (.refused/), falls back
        assert checkpoint is not None and checkpoint.step == 10
    (directory / layout.step_dir(40)).mkdir()  # a save killed between the rename and the marker
    (directory / layout.step_dir(40) / "model.bin").write_bytes(b"x")
    legacy = directory / layout.step_dir(5)
    legacy.mkdir()
    (legacy / "model.bin").write_bytes(b"y" * 10)
    write_marker(legacy, Marker(5, {"model.bin": FileRecord(10, None)}))  # a marker from before checksums
    stale = directory / layout.staging_dir(50, "crashedrun")
    (stale / "rank-00000").mkdir(parents=True)
    (directory / layout.lock_file(50)).touch()
    age(stale, 2 * HOUR)
    age(directory / layout.lock_file(50), 2 * HOUR)
    fresh = directory / layout.staging_dir(60, "liverun")
    fresh.mkdir()

    state = inspect(directory, stale_minutes=60)
    found = checks(state)
    assert {k: f["status"] for k, f in found.items()} == {
        "checkpoint_torn": "warning",
        "checkpoint_refused": "warning",
        "checkpoint_stale": "warning",
        "checkpoint_unchecksummed": "warning",
    }
    assert state["torn"] == ["step-00000040"] and "step-00000040" in found["checkpoint_torn"]["detail"]
    assert [r["name"].split(".")[0] for r in state["refused"]] == ["step-00000020"]
    assert "CRC32C" in state["refused"][0]["problems"][0]
    assert state["stale"] == [".step-00000050.lock", stale.name] and state["in_flight"] == [fresh.name]
    assert "step-00000005" in found["checkpoint_unchecksummed"]["detail"]
    assert state["newest_valid_step"] == 10


def test_the_command_line_reports_the_directory_and_exits_1_on_a_critical_step(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "shard-0.bin").write_bytes(os.urandom(64 * 1024))
    directory = tmp_path / "run"
    save_steps(directory, 10, 20)
    (directory / layout.step_dir(30)).mkdir()
    report_file = tmp_path / "report.json"
    command = [sys.executable, "-m", "ai_storage_training", "doctor", str(data), "--no-fio", "--checkpoint-mib", "1"]
    command += ["--checkpoints", str(directory), "--json", str(report_file)]

    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(report_file.read_text())
    assert proc.returncode == (1 if report["status"] == "critical" else 0) and not beyond_progress(proc.stderr)
    assert report["checkpoints"]["torn"] == ["step-00000030"] and report["status"] in ("warning", "critical")
    assert (
        "torn checkpoint" in proc.stdout and "2 of 2 committed validate (crc32c), newest valid step 20" in proc.stdout
    )

    flip_byte(directory / layout.step_dir(20) / "model.bin")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    report = json.loads(report_file.read_text())
    assert proc.returncode == 1 and report["status"] == "critical" and not beyond_progress(proc.stderr)
    assert "CRITICAL step-00000020: model.bin: CRC32C" in proc.stdout and "verdict: CRITICAL" in proc.stdout


def test_the_host_memory_a_save_stages_is_reported_and_a_share_that_does_not_fit_is_a_warning(tmp_path, monkeypatch):
    save_steps(tmp_path, 1, 2)
    state = inspect(tmp_path)
    assert state["staging_bytes_per_rank"] == 50_000 and state["host_memory_available_bytes"] > 0
    assert not [f for f in findings(state) if f["check"] == "checkpoint_staging_memory"]
    monkeypatch.setattr("ai_storage_training.doctor.checkpoints.meminfo", lambda: {"MemAvailable": 10_000})
    warned = [f for f in findings(inspect(tmp_path)) if f["check"] == "checkpoint_staging_memory"]
    assert [f["status"] for f in warned] == ["warning"] and "x max_in_flight per rank" in warned[0]["detail"]
