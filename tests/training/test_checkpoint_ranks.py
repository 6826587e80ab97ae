"""Several ranks, one commit, without torch: the file-based protocol (``ai_storage_training.checkpoint.ranks``).
Ranks are processes saving through their own CheckpointManager on one directory, some killed with SIGKILL."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from ai_storage_training import CheckpointInvalidError, CheckpointManager
from ai_storage_training.checkpoint import layout
from ai_storage_training.checkpoint import manager as checkpoints
from ai_storage_training.checkpoint.commit import problems, read_marker

ROOT = Path(__file__).resolve().parents[2]
RANK = """
import sys, time
from pathlib import Path
from ai_storage_training import CheckpointManager
directory, rank, world_size, run_id, first, last, timeout = sys.argv[1:8]
rank, world_size = int(rank), int(world_size)
manager = CheckpointManager(directory, keep=2, rank=rank, world_size=world_size, run_id=run_id, timeout=float(timeout))
with manager.load() as checkpoint:
    start = checkpoint.step + 1 if checkpoint else int(first)
    seen = (checkpoint.path / f"rank-{rank:05d}" / "state").read_text() if checkpoint else "-"
print("resumed", start - 1, seen, flush=True)
for step in range(start, int(last) + 1):
    manager.save(step, lambda d: (d / "state").write_text(f"{step}:{rank}:{run_id}"))
    print("saved", step, flush=True)
"""


def start(directory: Path, world_size: int, last: int, *, first: int = 1, timeout: float = 20, ranks=None):
    run_id = uuid.uuid4().hex[:10]
    return run_id, [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RANK,
                str(directory),
                str(r),
                str(world_size),
                run_id,
                str(first),
                str(last),
                str(timeout),
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (range(world_size) if ranks is None else ranks)
    ]


def whole(directory: Path, world_size: int) -> list[int]:
    """Every committed step lists one state file per rank, all of one run, all validating."""
    steps = []
    for path in sorted(directory.glob(layout.STEP_GLOB)):
        marker = read_marker(path)
        if marker is None:
            continue
        assert sorted(marker.files) == [f"{layout.rank_dir(r)}/state" for r in range(world_size)], marker
        assert problems(path, marker) == []
        owners = {(path / name).read_text().split(":")[2] for name in marker.files}
        assert owners == {marker.run_id}, (path, owners)  # no shard of another run
        steps.append(marker.step)
    return steps


def test_three_ranks_commit_each_step_once_with_every_rank_listed(tmp_path):
    run_id, ranks = start(tmp_path, 3, last=4)
    outputs = [rank.communicate(timeout=60) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [0, 0, 0], outputs
    assert all(out.splitlines()[-1] == "saved 4" for out, _ in outputs)
    assert whole(tmp_path, 3) == [3, 4]
    marker = read_marker(tmp_path / layout.step_dir(4))
    assert marker is not None and marker.run_id == run_id and marker.world_size == 3
    assert {record.rank for record in marker.files.values()} == {0, 1, 2}
    _, ranks = start(tmp_path, 3, last=5)
    outputs = [rank.communicate(timeout=60) for rank in ranks]
    assert [out.splitlines()[0] for out, _ in outputs] == [f"resumed 4 4:{r}:{run_id}" for r in range(3)]


def test_a_missing_rank_means_no_commit_and_its_leftovers_are_cleaned_by_the_next_run(tmp_path):
    # rank 1 never comes; 10 s (not 2): rank 2 gets its own shard in first even on a busy machine
    _, ranks = start(tmp_path, 3, last=1, timeout=10, ranks=[0, 2])
    outputs = [rank.communicate(timeout=60) for rank in ranks]
    assert [rank.returncode for rank in ranks] == [1, 1]
    assert "ranks [1] did not finish their shards within 10.0s" in outputs[0][1]
    # rank 2 hears the coordinator's abort, or (on a busy machine) its own wait for the commit ends first
    assert re.search(r"coordinator did not commit step-00000001|step-00000001 was not committed", outputs[1][1])
    assert whole(tmp_path, 3) == [] and len(list(tmp_path.glob(".step-00000001.tmp-*"))) == 1
    _, ranks = start(tmp_path, 3, last=1)
    assert [rank.wait(60) for rank in ranks] == [0, 0, 0]
    assert whole(tmp_path, 3) == [1] and list(tmp_path.glob(".step-*.tmp-*")) == []


def test_the_coordinators_refusal_is_every_ranks_resume_point(tmp_path):
    _, ranks = start(tmp_path, 2, last=2)
    assert [rank.wait(60) for rank in ranks] == [0, 0]
    state = tmp_path / layout.step_dir(2) / layout.rank_dir(1) / "state"
    state.write_text(state.read_text().replace("2:", "9:", 1))  # same size, other bytes
    _, ranks = start(tmp_path, 2, last=2)
    outputs = [rank.communicate(timeout=60) for rank in ranks]
    assert [out.splitlines()[0].split()[:2] for out, _ in outputs] == [["resumed", "1"], ["resumed", "1"]]
    assert whole(tmp_path, 2) == [1, 2]


def test_kill_9_of_any_rank_at_any_moment_never_commits_a_step_lacking_a_shard(tmp_path):
    chance = random.Random(3)
    for iteration in range(8):
        _, ranks = start(tmp_path, 3, last=10_000, timeout=5)
        for rank in ranks:  # every rank is saving (on a busy CPU, starting Python alone can take a second or more)
            assert rank.stdout is not None and rank.stdout.readline().startswith("resumed"), rank.stderr
        time.sleep(chance.uniform(0.3, 1.5))
        victims = [chance.randrange(3)] if iteration % 2 else [0, 1, 2]
        for victim in victims:
            ranks[victim].send_signal(signal.SIGKILL)
        time.sleep(chance.uniform(0, 0.2))
        for rank in ranks:
            rank.kill()
            rank.communicate()
        whole(tmp_path, 3)
    steps = whole(tmp_path, 3)
    _, ranks = start(tmp_path, 3, last=max(steps or [0]) + 2)
    assert [rank.wait(60) for rank in ranks] == [0, 0, 0]
    assert len(whole(tmp_path, 3)) == 2 and steps and max(whole(tmp_path, 3)) == max(steps) + 2


def test_one_process_with_a_run_id_of_its_own_keeps_working_alone(tmp_path):
    manager = CheckpointManager(tmp_path, run_id="solo")
    assert manager.save(1, lambda d: (d / "state").write_text("1:0:solo")).path == tmp_path / layout.step_dir(1)


def test_when_the_coordinator_refuses_the_step_asked_for_every_rank_hears_why(tmp_path):
    _, ranks = start(tmp_path, 2, last=1)
    assert [rank.wait(60) for rank in ranks] == [0, 0]
    (tmp_path / layout.step_dir(1) / layout.rank_dir(0) / "state").write_text("x")
    managers = [CheckpointManager(tmp_path, rank=r, world_size=2, run_id="again", timeout=5) for r in (0, 1)]
    with pytest.raises(CheckpointInvalidError, match="step 1"), managers[0].load(step=1):
        pass
    refused = r"chose no step to resume from: checkpoint of step 1 .* was refused"
    with pytest.raises(RuntimeError, match=refused), managers[1].load(step=1):
        pass


def test_a_rank_whose_write_fails_stops_the_others_at_once(tmp_path):
    managers = [CheckpointManager(tmp_path, rank=r, world_size=2, run_id="fails", timeout=60) for r in (0, 1)]

    def broken(directory: Path) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        managers[1].save(1, broken)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"will not be committed: rank 1 failed: OSError\('disk full'\)"):
        managers[0].save(1, lambda d: (d / "state").write_text("1:0:fails"))
    assert time.monotonic() - started < 5 and whole(tmp_path, 2) == []


def test_a_coordinator_that_cannot_lock_the_step_for_its_commit_stops_the_others_at_once(tmp_path, monkeypatch):
    managers = [CheckpointManager(tmp_path, rank=r, world_size=2, run_id="nolock", timeout=60) for r in (0, 1)]
    real_lock_waiting = checkpoints.lock_waiting

    def lock_waiting(path: Path, *, shared: bool, timeout: float, what: str) -> int:
        if not shared:  # the commit's exclusive lock (the shared ones are the ranks' writes)
            raise PermissionError(1, "Operation not permitted", str(path))
        return real_lock_waiting(path, shared=shared, timeout=timeout, what=what)

    monkeypatch.setattr(checkpoints, "lock_waiting", lock_waiting)
    errors: list[BaseException | None] = []
    waiting = threading.Thread(target=lambda: errors.append(_save_error(managers[1])))  # writes, then waits
    waiting.start()
    with pytest.raises(PermissionError):
        managers[0].save(1, lambda d: (d / "state").write_text("1:0:nolock"))
    started = time.monotonic()
    waiting.join(30)
    assert time.monotonic() - started < 5, "rank 1 kept waiting for a commit that had failed"
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError), errors
    assert "the commit failed: PermissionError" in str(errors[0]) and whole(tmp_path, 2) == []


def _save_error(manager: CheckpointManager) -> BaseException | None:
    try:
        manager.save(1, lambda d: (d / "state").write_text("1:1:nolock"))
    except BaseException as error:  # the test inspects it
        return error
    return None
