"""A promoter as its own process, for tests that kill it: ``promoter_job.py LOCAL DURABLE [SECONDS]`` promotes every
committed step of LOCAL to DURABLE (keeping 3 there, none locally) until none is left, then exits 0. SECONDS (test
hook) slows each file copy by that much (files are copied 8 at a time), so a kill at a random moment lands in a
copy most of the time. :func:`kill_at_random` is the loop the tests run it in (local disk and JuiceFS)."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, when run as a program

from ai_storage_training.checkpoint import layout
from ai_storage_training.checkpoint import manager as checkpoints
from ai_storage_training.checkpoint.manager import CheckpointManager
from ai_storage_training.checkpoint.promotion import Promoter


def kill_at_random(
    local: CheckpointManager, durable: Path, land: Callable[[int], None], rounds: int, seed: int
) -> tuple[int, int | None, int, int]:
    """``rounds`` times: the job lands three more steps locally, then this promoter runs and is killed with
    SIGKILL after a random 0.2 to 1.5 s unless it finished. After each round the newest durable step validates
    (every byte read back) and never goes back, and no local step is gone unless a step at least as new is
    durable. Returns (the last step landed, the newest durable step, kills, kills that interrupted a copy)."""
    rng = random.Random(seed)
    step, newest, kills, mid_copy = 0, None, 0, 0
    for _ in range(rounds):
        for _ in range(3):
            step += 1
            land(step)
        proc = subprocess.Popen([sys.executable, __file__, str(local.directory), str(durable), "0.5"])
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
            check.validate(latest.step)
            newest = latest.step
        kept = {c.step for c in CheckpointManager(local.directory, keep=None).checkpoints()}
        gone = set(range(1, step + 1)) - kept
        assert not gone or (newest is not None and max(gone) <= newest), f"local {sorted(gone)} left unpromoted"
    return step, newest, kills, mid_copy


def main() -> None:
    if len(sys.argv) > 3:
        copy, delay = checkpoints.copy_file, float(sys.argv[3])

        def slow_copy(source, target):
            time.sleep(delay)
            return copy(source, target)

        checkpoints.copy_file = slow_copy
    local, durable = CheckpointManager(sys.argv[1], keep=None), CheckpointManager(sys.argv[2], keep=3)
    promoter = Promoter(local, durable, local_keep=0)
    while promoter.promote():
        pass


if __name__ == "__main__":
    main()
