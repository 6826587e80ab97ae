"""Promotion to the real JuiceFS mount (real Redis, S3 endpoint): checkpoints landed on a local disk are promoted
by a process killed with SIGKILL at random points; the newest durable step always validates and never goes back,
a local step goes only once it is durable, and the restore test passes on what was promoted."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
from pathlib import Path

import harness

from ai_storage_training import layout
from ai_storage_training.checkpoints import CheckpointManager

ROOT = Path(__file__).resolve().parents[2]
PROMOTER = ROOT / "tests" / "training" / "promoter_job.py"


def land(manager: CheckpointManager, step: int) -> None:
    manager.save(step, lambda d: [(d / f"shard-{i}.bin").write_bytes(bytes([step % 251, i]) * 2**19) for i in range(3)])


def steps(directory: Path) -> list[int]:
    return [c.step for c in CheckpointManager(directory, keep=None).checkpoints()]


def test_the_newest_durable_step_on_juicefs_survives_a_promoter_killed_at_random_points(mounted, tmp_path):
    local = CheckpointManager(tmp_path / "local", keep=None)
    durable = mounted.mountpoint / "promotion-kill9"
    rng = random.Random(5)
    step, newest, kills, mid_copy = 0, None, 0, 0
    for _ in range(8):
        for _ in range(3):  # the job lands three more steps between kills
            step += 1
            land(local, step)
        proc = subprocess.Popen([sys.executable, str(PROMOTER), str(local.directory), str(durable), "0.5"])
        try:
            proc.wait(timeout=rng.uniform(0.2, 1.5))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            kills += 1
            mid_copy += durable.exists() and any(layout.parse_staging(p.name) is not None for p in durable.iterdir())
        check = CheckpointManager(durable, keep=None)
        latest = check.latest()
        if newest is not None:
            assert latest is not None and latest.step >= newest, f"durable step {newest} lost after a kill"
        if latest is not None:
            check.validate(latest.step)  # every byte, read back through the mount
            newest = latest.step
        gone = set(range(1, step + 1)) - set(steps(local.directory))
        assert not gone or (newest is not None and max(gone) <= newest), f"local {sorted(gone)} left unpromoted"
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
