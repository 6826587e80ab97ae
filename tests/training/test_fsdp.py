"""FSDP2 through the library: a model sharded with ``fully_shard`` (CPU, gloo) saves asynchronously through
``AsyncCheckpointer.save_dcp`` and resumes with ``restore`` on another number of ranks (2 -> 1, 1 -> 2), ending with
the parameters of a run that never stopped (``fsdp_job.py``: every rank trains on the same batch, so the training is
the same on any number of ranks)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from ai_storage_training import CheckpointManager
from tests.training.test_example_train import environment, free_port

JOB = Path(__file__).with_name("fsdp_job.py")
END = re.compile(r"^step (\d+) params ([0-9a-f]{16})$", re.M)


def run(checkpoints: Path, ranks: int, steps: int) -> tuple[str, int | None]:
    """Rank 0's ``step N params DIGEST`` line and the step it resumed at (None: a first start)."""
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}", str(JOB),
         f"--checkpoint-dir={checkpoints}", f"--steps={steps}"],
        capture_output=True, text=True, timeout=300, env=environment(free_port()), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    (end,) = END.findall(done.stdout)
    resumed = re.search(r"^resumed at (\d+)$", done.stdout, re.M)
    assert int(end[0]) == steps
    return end[1], int(resumed.group(1)) if resumed else None


@pytest.mark.parametrize(("before", "after"), [(2, 1), (1, 2)], ids=["2-to-1", "1-to-2"])
def test_an_fsdp2_job_resumes_on_another_number_of_ranks_as_if_it_never_stopped(tmp_path, before, after):
    checkpoints = tmp_path / "checkpoints"
    _, first_start = run(checkpoints, before, 3)
    marker = CheckpointManager(checkpoints).latest()
    assert first_start is None and marker is not None and marker.step == 3
    writers = {int(p.name.split("_")[2]) for p in marker.path.glob("__*_*.distcp")}  # __<rank>_<file>.distcp
    assert writers == set(range(before))  # every rank wrote its own shards
    resumed, at = run(checkpoints, after, 6)
    straight, _ = run(tmp_path / "straight", 2, 6)
    assert at == 3 and resumed == straight
