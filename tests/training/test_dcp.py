"""torch.distributed.checkpoint through the manager, with real torch: ranks are processes on gloo (forked from a
forkserver that preloaded torch), saving with ``dcp.async_save`` into the manager's writer (``dcp_job``)."""

from __future__ import annotations

import json
import multiprocessing
import random
import time
import uuid
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402

from ai_storage_training import CheckpointManager, layout  # noqa: E402
from ai_storage_training.commit import problems, read_marker  # noqa: E402
from tests.training import dcp_job  # noqa: E402

CONTEXT = multiprocessing.get_context("forkserver")
CONTEXT.set_forkserver_preload(["tests.training.dcp_job"])


def launch(world_size: int, directory: Path, records: Path, steps: int, keep: int = 3) -> tuple[str, list]:
    run_id = uuid.uuid4().hex[:12]
    ranks = [
        CONTEXT.Process(
            target=dcp_job.run_rank, args=(r, world_size, str(directory), str(records), run_id, steps, keep)
        )
        for r in range(world_size)
    ]
    for rank in ranks:
        rank.start()
    return run_id, ranks


def run(world_size: int, directory: Path, records: Path, steps: int, keep: int = 3) -> str:
    run_id, ranks = launch(world_size, directory, records, steps, keep)
    for rank in ranks:
        rank.join(120)
    assert [rank.exitcode for rank in ranks] == [0] * world_size, (records / f"log-{run_id}-0.txt").read_text()
    return run_id


def resumed(records: Path, run_id: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(records.glob(f"resume-{run_id}-*.json"))]


def committed_steps_are_whole(directory: Path) -> list[int]:
    """Every committed step: its marker lists ``.metadata`` and a shard of every rank of one run, and every listed
    file validates (size and CRC32C). Returns the committed steps."""
    steps = []
    for path in sorted(directory.glob(layout.STEP_GLOB)):
        marker = read_marker(path)
        if marker is None:
            continue
        ranks_with_shards = {record.rank for name, record in marker.files.items() if name.endswith(".distcp")}
        assert ".metadata" in marker.files and ranks_with_shards == set(range(marker.world_size)), (path, marker)
        assert {f"__{r}_0.distcp" for r in range(marker.world_size)} <= set(marker.files), marker
        assert problems(path, marker) == [], path
        assert not [p.name for p in path.iterdir() if p.name not in marker.files and p.name != layout.MARKER]
        steps.append(marker.step)
    return steps


def test_saved_on_four_ranks_resumed_on_two_bit_for_bit_with_every_shard_listed(tmp_path):
    directory, records = tmp_path / "ckpt", tmp_path / "records"
    records.mkdir()
    run(4, directory, records, steps=3)
    marker = read_marker(directory / layout.step_dir(3))
    assert marker is not None and marker.world_size == 4
    assert {record.rank for record in marker.files.values()} == {0, 1, 2, 3}
    second = run(2, directory, records, steps=4)
    assert resumed(records, second) == [{"step": 3, "checkpoint": 3, "identical": True}] * 2
    assert committed_steps_are_whole(directory) == [2, 3, 4]


def test_a_flipped_byte_is_refused_naming_the_file_and_the_job_saves_that_step_again(tmp_path):
    directory, records = tmp_path / "ckpt", tmp_path / "records"
    records.mkdir()
    run(2, directory, records, steps=3)
    shard = directory / layout.step_dir(3) / "__1_0.distcp"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size, one bit differs
    shard.write_bytes(bytes(data))
    second = run(2, directory, records, steps=4)
    assert resumed(records, second) == [{"step": 2, "checkpoint": 2, "identical": True}] * 2
    log = (records / f"log-{second}-0.txt").read_text()
    assert "refused checkpoint" in log and "__1_0.distcp: CRC32C" in log and ".refused" in log
    assert [p.name.split(".")[0] for p in (directory / layout.REFUSED).iterdir()] == ["step-00000003"]
    marker = read_marker(directory / layout.step_dir(3))
    assert marker is not None and marker.run_id == second  # saved again, by the new run only
    assert committed_steps_are_whole(directory) == [2, 3, 4]


def test_a_rollback_lets_a_single_process_save_the_abandoned_steps_again(tmp_path):
    manager = CheckpointManager(tmp_path, keep=None)
    model, optimizer = dcp_job.make()
    for step in (1, 2, 3):
        dcp_job.train(model, optimizer, step)
        dcp.save({"model": model.state_dict(), "step": {"n": step}}, storage_writer=manager.writer(step))
    with pytest.raises(CheckpointException, match=r"FileExistsError: checkpoint .*step-00000002 already exists"):
        dcp.save({"model": model.state_dict()}, storage_writer=manager.writer(2))
    state = {"model": dcp_job.make()[0].state_dict(), "step": {"n": -1}}
    reader = manager.reader(1, rollback=True)
    assert reader is not None and reader.checkpoint.step == 1
    dcp.load(state, storage_reader=reader)
    assert state["step"]["n"] == 1 and [c.step for c in manager.checkpoints()] == [1]
    assert sorted(p.name.split(".")[0] for p in (tmp_path / layout.RETIRED).iterdir()) == [
        "step-00000002",
        "step-00000003",
    ]
    dcp.save({"model": model.state_dict(), "step": {"n": 2}}, storage_writer=manager.writer(2))
    assert [c.step for c in manager.checkpoints()] == [1, 2]


@pytest.mark.parametrize(("world_size", "iterations"), [(2, 8), (4, 6)])
def test_kill_9_of_a_rank_all_ranks_or_the_coordinator_never_commits_a_partial_or_mixed_step(
    tmp_path, world_size, iterations
):
    """Each iteration starts the job, kills one rank, the coordinator or every rank with SIGKILL at a random point
    (startup, restore, training, a save in flight), then the rest (as torchrun does); what is committed must be
    whole, and each restart resumes bit for bit from a whole step."""
    directory, records = tmp_path / "ckpt", tmp_path / "records"
    records.mkdir()
    chance = random.Random(world_size)
    runs = []
    for iteration in range(iterations):
        run_id, ranks = launch(world_size, directory, records, steps=10_000, keep=2)
        runs.append(run_id)
        time.sleep(chance.uniform(0.3, 2.5))
        victims = {
            "one rank": [chance.randrange(1, world_size)],
            "coordinator": [0],
            "all ranks": list(range(world_size)),
        }[("one rank", "coordinator", "all ranks")[iteration % 3]]
        for victim in victims:
            ranks[victim].kill()  # SIGKILL (nothing if it already ended)
        time.sleep(chance.uniform(0.0, 0.3))  # the survivors go on for a moment, then the agent stops them
        for rank in ranks:
            rank.kill()
            rank.join(30)
        committed_steps_are_whole(directory)
    final = run(world_size, directory, records, steps=max(committed_steps_are_whole(directory) or [0]) + 2, keep=2)
    verdicts = [v for run_id in [*runs, final] for v in resumed(records, run_id)]
    assert verdicts and all(v["identical"] for v in verdicts), verdicts
    assert any(v["step"] > 0 for v in verdicts)
    assert len(committed_steps_are_whole(directory)) == 2
