"""A promoter as its own process, for tests that kill it: ``promoter_job.py LOCAL DURABLE [SECONDS]`` promotes every
committed step of LOCAL to DURABLE (keeping 3 there, none locally) until none is left, then exits 0. SECONDS (test
hook) slows each file copy by that much (files are copied 8 at a time), so a kill at a random moment lands in a
copy most of the time."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, when run as a program

from ai_storage_training import checkpoints
from ai_storage_training.checkpoints import CheckpointManager
from ai_storage_training.promotion import Promoter


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
