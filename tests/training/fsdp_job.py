"""An FSDP2 job as the docs show it: a model sharded with ``fully_shard`` (CPU, gloo: a 1-D device mesh), AdamW,
checkpointed asynchronously through the library (``AsyncCheckpointer.save_dcp``: DCP writes every rank's shards of
the parameters and the optimizer state) and resumed with ``restore`` on any number of ranks (DCP reshards).

Every rank trains on the same batch of each step (seeded by the step), so the training is the same on any number of
ranks: a run resumed on another world size ends with the parameters of a run that never stopped. Run under torchrun:
``fsdp_job.py --checkpoint-dir DIR --steps N [--save-every K]``; rank 0 prints ``resumed at S`` (when it resumed) and
``step N params DIGEST`` (the full parameters' SHA-256, gathered).
"""

from __future__ import annotations

import argparse
import hashlib

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import init_device_mesh

from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint.async_save import AsyncCheckpointer
from ai_storage_training.checkpoint.dcp import restore


def sharded_model(world: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model, each Linear and then the whole sharded over the ranks (FSDP2), and its AdamW."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    mesh = init_device_mesh("cpu", (world,))
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--save-every", type=int, default=3)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model, optimizer = sharded_model(world)
    manager = CheckpointManager(args.checkpoint_dir, keep=2)

    def state(step: int) -> dict:
        model_state, optim_state = get_state_dict(model, optimizer)  # DTensor shards: DCP saves and reshards them
        return {"model": model_state, "optim": optim_state, "train": {"step": step}}

    loaded = state(0)
    step = 0
    with AsyncCheckpointer(manager) as checkpointer:  # claims the directory (rank 0) before the resume
        if restore(manager, loaded) is not None:
            set_state_dict(model, optimizer, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"])
            step = int(loaded["train"]["step"])
            if rank == 0:
                print(f"resumed at {step}", flush=True)
        while step < args.steps:
            step += 1
            inputs = torch.randn(8, 16, generator=torch.Generator().manual_seed(step))  # the same on every rank
            model(inputs).sub(inputs.sum(dim=1, keepdim=True)).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            if step % args.save_every == 0:
                checkpointer.save_dcp(step, state(step))
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        digest = hashlib.sha256(b"".join(full[name].numpy().tobytes() for name in sorted(full))).hexdigest()[:16]
        print(f"step {step} params {digest}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
