"""Ranks on separate nodes, modelled by two JuiceFS clients of one volume (two ``juicefs mount`` with the cold
tier's generated options, entry cache on): two ranks, each saving through its own mount, commit every
multi-rank checkpoint of the file-based protocol. A rank's client keeps a kernel entry for a step's lock file
that the other client's rank removed (its last holder); opening that stale entry fails (EPERM) until it expires,
and the lock retries it instead of failing the save."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from ai_storage_training import layout
from ai_storage_training.commit import problems, read_marker

ROOT = Path(__file__).resolve().parents[2]
RANK = """
import os, sys
from ai_storage_training import CheckpointManager
from ai_storage_training.commit import STALE_ENTRY_ERRORS
directory, rank, run_id, steps = sys.argv[1:5]
stale, real_open = [], os.open

def counting_open(path, flags, *args, **kwargs):  # counts the lock file opens that met a stale cached entry
    try:
        return real_open(path, flags, *args, **kwargs)
    except OSError as error:
        if str(path).endswith(".lock") and error.errno in STALE_ENTRY_ERRORS:
            stale.append(error.errno)
        raise

os.open = counting_open
manager = CheckpointManager(directory, keep=2, rank=int(rank), world_size=2, run_id=run_id, timeout=60)
for step in range(1, int(steps) + 1):
    manager.save(step, lambda d: (d / "state").write_text(f"{step}:{rank}:{run_id}"))
    print("saved", step, flush=True)
print("stale", len(stale), flush=True)
"""
ROUNDS, STEPS = 3, 6


def save_on_two_clients(directories: tuple[Path, Path], steps: int) -> tuple[str, int]:
    """Rank r saves steps 1..``steps`` through ``directories[r]``; both must exit 0 having saved every step.
    Returns the run id and how many lock file opens met a stale entry (and were retried)."""
    run_id = uuid.uuid4().hex[:10]
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(directory), str(rank), run_id, str(steps)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, directory in enumerate(directories)
    ]
    outputs = [rank.communicate(timeout=300) for rank in ranks]
    for rank, (process, (out, err)) in enumerate(zip(ranks, outputs, strict=True)):
        assert process.returncode == 0, f"rank {rank} failed after saving {out.split()}:\n{err[-3000:]}"
        *saved, stale = out.splitlines()
        assert saved == [f"saved {step}" for step in range(1, steps + 1)] and stale.startswith("stale "), out
    return run_id, sum(int(out.splitlines()[-1].split()[1]) for out, _ in outputs)


def test_two_ranks_each_on_its_own_client_commit_every_step(stack, fuse_ok, generated, juicefs_flags):
    options = generated["mount_options"]
    assert "entry-cache=0" not in options  # the generated options cache entries: the case that failed
    with (
        stack.mount(options, name="rank-client-0", spec=juicefs_flags) as first,
        stack.mount(options, name="rank-client-1", spec=juicefs_flags) as second,
    ):
        stale = 0
        for round_ in range(ROUNDS):
            name = f"rank-clients-{round_}"
            (first.mountpoint / name).mkdir()
            run_id, met = save_on_two_clients((first.mountpoint / name, second.mountpoint / name), STEPS)
            stale += met
            for mount in (first, second):  # each client sees the same committed steps, whole, of this run
                directory = mount.mountpoint / name
                committed = sorted(directory.glob(layout.STEP_GLOB))
                assert [path.name for path in committed] == [layout.step_dir(s) for s in (STEPS - 1, STEPS)]
                for path in committed:
                    marker = read_marker(path)
                    assert marker is not None and marker.run_id == run_id and marker.world_size == 2, path
                    assert sorted(marker.files) == [f"{layout.rank_dir(r)}/state" for r in (0, 1)]
                    assert problems(path, marker) == []
    # the case this test is for happened: without it every save above would pass on any lock
    assert stale > 0, f"no lock file open met a stale entry in {ROUNDS * STEPS} saves: the race was not exercised"
