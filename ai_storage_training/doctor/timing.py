"""The doctor's checkpoint timing: save and restore test checkpoints with the CheckpointManager."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from ..checkpoint.manager import CheckpointManager
from .reads import drop_cache

CHECKPOINT_FILES = 4


def checkpoint_test(directory: Path, size: int, saves: int) -> dict[str, Any]:
    """Save ``saves`` checkpoints of ``size`` bytes with the CheckpointManager in a fresh subdirectory of
    ``directory``, restore the newest and check its bytes; remove the subdirectory."""
    work = directory / f".ai-storage-doctor-{uuid.uuid4().hex[:8]}"
    try:
        work.mkdir(parents=True)
    except OSError as e:
        return {"skipped": f"cannot write in {directory} ({e.strerror}); pass --checkpoint-dir with a writable path"}
    try:
        manager = CheckpointManager(work, keep=1)
        shard = size // CHECKPOINT_FILES
        save_times: list[float] = []
        failures, expected = 0, {}
        for step in range(1, saves + 1):
            blobs = {f"shard-{i}.bin": os.urandom(shard) for i in range(CHECKPOINT_FILES)}

            def write(directory: Path, blobs: dict[str, bytes] = blobs) -> None:
                for name, blob in blobs.items():
                    (directory / name).write_bytes(blob)

            started = time.perf_counter()
            try:
                manager.save(step, write)
            except OSError:
                failures += 1
                continue
            save_times.append(time.perf_counter() - started)
            expected = {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items()}
        report: dict[str, Any] = {
            "bytes": shard * CHECKPOINT_FILES,
            "saves": saves,
            "failures": failures,
            "failure_percent": round(100 * failures / saves, 1),
            "save_seconds": round(max(save_times), 3) if save_times else None,
        }
        latest = manager.latest()
        if latest is not None:
            for f in latest.path.iterdir():
                drop_cache(f)
            started = time.perf_counter()
            with manager.load(step=latest.step) as checkpoint:
                got = {n: hashlib.sha256((latest.path / n).read_bytes()).hexdigest() for n in expected}
            report["restore_seconds"] = round(time.perf_counter() - started, 3)
            report["restored_identical"] = checkpoint == latest and got == expected
        return report
    finally:
        shutil.rmtree(work, ignore_errors=True)
