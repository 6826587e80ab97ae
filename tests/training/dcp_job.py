"""A tiny deterministic PyTorch job whose ranks checkpoint through ``dcp.async_save`` and the manager's writer.

The state at step ``s`` is a pure function of ``s`` (:func:`replay`): a small model trained with AdamW on inputs
seeded by the step, plus a table sharded across the ranks as a DTensor (``Shard(0)``), so every rank writes its
own shard and a load on another world size reshards. A rank resuming compares what it loaded with the replay
and records the verdict in ``<records>/resume-<run id>-<rank>.json``: the test reads those.

:func:`run_rank` is the body of one rank; the test side (:func:`launch`, :func:`kill_loop`) starts ranks through
a ``forkserver`` that preloaded this module and torch, so a rank starts in a fraction of a second.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import random
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch._dynamo  # AdamW imports it on first use: 2 s; here the forkserver pays it once)
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor, Shard, init_device_mesh

from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint import layout
from ai_storage_training.checkpoint.commit import problems, read_marker
from ai_storage_training.checkpoint.dcp import ManagedWriter, restore
from tests.training.corruption import flip_byte

TABLE_ROWS = 16


def make() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    inputs = torch.randn(8, 16, generator=torch.Generator().manual_seed(step))
    model(inputs).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def table_at(step: int) -> torch.Tensor:
    return torch.arange(TABLE_ROWS * 4, dtype=torch.float32).reshape(TABLE_ROWS, 4) * (step + 1)


def shard_of(mesh, step: int) -> DTensor:
    """This rank's rows of the table at ``step``, as a DTensor sharded over the ranks (no communication)."""
    rows = table_at(step).chunk(mesh.size())[mesh.get_local_rank()]
    return DTensor.from_local(rows.clone(), mesh, [Shard(0)], run_check=False)


def replay(step: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and optimizer after steps 1..``step`` (step 0: untrained)."""
    model, optimizer = make()
    for s in range(1, step + 1):
        train(model, optimizer, s)
    return model, optimizer


def flat(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """Every tensor of the model's and the optimizer's state, by name (for bit-for-bit comparison)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    out = {f"model.{k}": v for k, v in model_state.items()}
    for name, per_param in optim_state["state"].items():
        for key, value in per_param.items():
            out[f"optim.{name}.{key}"] = torch.as_tensor(value)
    return out


def identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def run_rank(rank: int, world_size: int, directory: str, records: str, run_id: str, steps: int, keep: int) -> None:
    """One rank: resume from the newest valid step (checking it bit for bit), then train and save up to ``steps``."""
    torch.set_num_threads(1)
    logging.basicConfig(filename=f"{records}/log-{run_id}-{rank}.txt", level=logging.INFO)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{records}/init-{run_id}",
        rank=rank,
        world_size=world_size,
        timeout=timedelta(seconds=30),
    )
    mesh = init_device_mesh("cpu", (world_size,))
    manager = CheckpointManager(directory, keep=keep, run_id=run_id)
    model, optimizer = make()
    table = shard_of(mesh, 0)
    saves = dist.new_group(backend="gloo")  # async saves talk on their own group, beside the training thread
    start = 0
    state: dict = {}

    def loadable() -> dict:  # made only when there is a checkpoint: get_state_dict initializes AdamW's state
        model_state, optim_state = get_state_dict(model, optimizer)
        state.update(model=model_state, optim=optim_state, table=table, extra={"step": -1})
        return state

    checkpoint = restore(manager, loadable)  # every item verified as it is read; a refused step falls back
    if checkpoint is not None:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        start = int(state["extra"]["step"])
        loaded = state["table"]
        assert isinstance(loaded, DTensor)
        verdict = {
            "step": start,
            "checkpoint": checkpoint.step,
            "identical": identical(flat(model, optimizer), flat(*replay(start)))
            and torch.equal(loaded.full_tensor(), table_at(start)),
        }
        Path(records, f"resume-{run_id}-{rank}.json").write_text(json.dumps(verdict))
    pending = None
    for step in range(start + 1, steps + 1):
        train(model, optimizer, step)
        model_state, optim_state = get_state_dict(model, optimizer)
        table = shard_of(mesh, step)
        state = {"model": model_state, "optim": optim_state, "table": table, "extra": {"step": step}}
        if pending is not None:
            pending.result()  # at most one save in flight; a background failure surfaces here
        pending = dcp.async_save(state, storage_writer=ManagedWriter(manager, step), process_group=saves)
        time.sleep(float(os.environ.get("DCP_JOB_STEP_SECONDS", "0.05")))
    if pending is not None:
        pending.result()
    dist.barrier()
    dist.destroy_process_group()


# The test side: start ranks from a forkserver that preloaded this module (and torch), and check what they left.

CONTEXT = multiprocessing.get_context("forkserver")
CONTEXT.set_forkserver_preload([__name__])


def launch(world_size: int, directory: Path, records: Path, steps: int, keep: int = 3) -> tuple[str, list]:
    run_id = uuid.uuid4().hex[:12]
    ranks = [
        CONTEXT.Process(target=run_rank, args=(r, world_size, str(directory), str(records), run_id, steps, keep))
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


def writer_calling(before_write: Callable[[], object]) -> type[ManagedWriter]:
    """A ManagedWriter that calls ``before_write()`` before each rank writes its files: a write held at a gate, or
    one that fails (``save_dcp(step, state, storage_writer=Writer(manager, step))``)."""

    class Writer(ManagedWriter):
        def write_data(self, plan, planner):
            before_write()
            return super().write_data(plan, planner)

    return Writer


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


def kill_loop(root: Path, world_size: int, iterations: int) -> None:
    """Each iteration starts the job, kills one rank, the coordinator or every rank with SIGKILL at a random point
    (startup, restore, training, a save in flight), then the rest (as torchrun does); what is committed must be
    whole, and each restart resumes bit for bit from a whole step."""
    directory, records = root / "ckpt", root / "records"
    records.mkdir()
    chance = random.Random(world_size)
    runs, newest = [], 0
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
        steps = committed_steps_are_whole(directory)
        assert max(steps, default=0) >= newest, (steps, newest)  # the newest durable step survives every kill
        newest = max(steps, default=0)
    final = run(world_size, directory, records, steps=max(committed_steps_are_whole(directory) or [0]) + 2, keep=2)
    verdicts = [v for run_id in [*runs, final] for v in resumed(records, run_id)]
    assert verdicts and all(v["identical"] for v in verdicts), verdicts
    assert any(v["step"] > 0 for v in verdicts)
    assert len(committed_steps_are_whole(directory)) == 2


def flip_and_resume(root: Path) -> None:
    """Two ranks save steps 1-3; one bit of rank 1's shard of step 3 flips (size kept); the restarted job reads
    the step once, refuses it at the flipped item naming the file, loads again from step 2 (bit for bit), trains
    past step 3 and saves it again (new run only)."""
    directory, records = root / "ckpt", root / "records"
    records.mkdir()
    run(2, directory, records, steps=3)
    shard = directory / layout.step_dir(3) / "__1_0.distcp"
    flip_byte(shard)  # same size, one bit differs
    second = run(2, directory, records, steps=4)
    assert resumed(records, second) == [{"step": 2, "checkpoint": 2, "identical": True}] * 2
    log = (records / f"log-{second}-0.txt").read_text()
    assert "refused checkpoint" in log and "__1_0.distcp: the item at offset" in log and ".refused" in log
    assert [p.name.split(".")[0] for p in (directory / layout.REFUSED).iterdir()] == ["step-00000003"]
    marker = read_marker(directory / layout.step_dir(3))
    assert marker is not None and marker.run_id == second  # saved again, by the new run only
    assert committed_steps_are_whole(directory) == [2, 3, 4]
