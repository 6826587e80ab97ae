"""Promotion to the real JuiceFS mount (real Redis, S3 endpoint): checkpoints landed on a local disk are promoted
by a process killed with SIGKILL at random points; the newest durable step always validates and never goes back,
a local step goes only once it is durable, and the restore test passes on what was promoted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import harness

from ai_storage_training.checkpoint.manager import CheckpointManager
from tests.training import promoter_job

ROOT = Path(__file__).resolve().parents[2]
PROMOTER = ROOT / "tests" / "training" / "promoter_job.py"


def land(manager: CheckpointManager, step: int) -> None:
    manager.save(step, lambda d: [(d / f"shard-{i}.bin").write_bytes(bytes([step % 251, i]) * 2**19) for i in range(3)])


def steps(directory: Path) -> list[int]:
    return [c.step for c in CheckpointManager(directory, keep=None).checkpoints()]


def test_the_newest_durable_step_on_juicefs_survives_a_promoter_killed_at_random_points(mounted, tmp_path):
    local = CheckpointManager(tmp_path / "local", keep=None)
    durable = mounted.mountpoint / "promotion-kill9"
    step, newest, kills, mid_copy = promoter_job.kill_at_random(
        local, durable, lambda step: land(local, step), rounds=8, seed=5
    )
    print(f"\npromoter killed {kills} times of 8 ({mid_copy} in a copy), newest durable step {newest} of {step}")
    assert kills >= 2 and mid_copy >= 1
    subprocess.run([sys.executable, str(PROMOTER), str(local.directory), str(durable)], check=True, timeout=300)
    assert steps(durable) == [step - 2, step - 1, step] and steps(local.directory) == []

    test = subprocess.run(
        [sys.executable, "-m", "ai_storage_training", "restore-test", str(durable)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=harness.subprocess_env(PYTHONPATH=str(ROOT)),
        check=False,
    )
    result = json.loads(test.stdout)
    assert test.returncode == 0 and result["status"] == "ok" and result["step"] == step, test.stdout + test.stderr
