"""The team's training entry point (the job runs it as /app/train.py in its image, under torchrun): a small PyTorch
model trained with AdamW, DDP over gloo when there is no GPU, checkpointed asynchronously through
torch.distributed.checkpoint (DCP) and the training library: model, optimizer, step and every rank's RNG state.
It resumes from the newest checkpoint that validates, so a job killed at any moment goes on from there.

Checkpoints go to --checkpoint-dir (default $AI_STORAGE_CHECKPOINT_DIR); with $AI_STORAGE_CHECKPOINT_LOCAL_DIR
(a node-local volume of the hot tier) and all ranks on one node, they land there and rank 0 promotes them to the
durable directory in the background. The data part is one function, ``batches``: each rank trains on its share of
the files under --data, step s on file s of the share (in a loop), read ahead by the library's PrefetchingReader.
The last line of each rank reads ``rank R: step S, loss L, params P`` (P: a digest of the model's parameters).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel

from ai_storage_training import PrefetchingReader, lag, metrics, promotion
from ai_storage_training.async_save import AsyncCheckpointer

FEATURES, BATCH = 16, 8


def batches(files: list[Path], first_step: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(inputs, targets) for steps ``first_step``, ``first_step + 1``, ...: step s reads file s of ``files`` (in a
    loop), its bytes as BATCH x FEATURES inputs in [0, 1]; the target is each row's mean."""
    start = first_step % len(files)
    while True:
        for _, data in PrefetchingReader(files[start:] + files[:start], depth=16, workers=4):
            raw = (data * (BATCH * FEATURES // max(1, len(data)) + 1))[: BATCH * FEATURES]
            inputs = torch.frombuffer(bytearray(raw), dtype=torch.uint8).float().reshape(BATCH, FEATURES) / 255
            yield inputs, inputs.mean(dim=1, keepdim=True)
        start = 0


def training_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int, rank: int) -> dict:
    """What a checkpoint holds: DCP's model and optimizer state dicts, the step, this rank's RNG state."""
    model_state, optim_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optim": optim_state, "train": {"step": step}, f"rng-{rank}": torch.get_rng_state()}


def resume(landing, durable, model, optimizer, rank: int) -> int:
    """Load the newest checkpoint that validates, a local one first (promotion.restore_manager, decided by rank 0
    for every rank); return its step (0 on a first start)."""
    local = None if landing is durable else landing
    use_local = [rank == 0 and local is not None and promotion.restore_manager(local, durable) is local]
    if dist.is_initialized():
        dist.broadcast_object_list(use_local, src=0)
    reader = (landing if use_local[0] else durable).reader()
    if reader is None:
        return 0
    state = training_state(model, optimizer, -1, rank)
    dcp.load(state, storage_reader=reader)
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    torch.set_rng_state(state[f"rng-{rank}"])
    return int(state["train"]["step"])


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="dataset directory (the cold-tier claim)")
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=os.environ.get(promotion.DIR_VARIABLE) or None,
        help=f"this run's durable checkpoints (default ${promotion.DIR_VARIABLE})",
    )
    parser.add_argument("--steps", type=int, default=1000, help="step to stop at")
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--keep", type=int, default=3, help="durable checkpoints to keep")
    parser.add_argument("--max-in-flight", type=int, default=1, help="checkpoint saves running at once")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step (tests: a slow job)")
    args = parser.parse_args()
    for name in ("steps", "save_every", "keep", "max_in_flight"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive integer; got {getattr(args, name)}")
    if args.checkpoint_dir is None:
        parser.error(f"--checkpoint-dir: expected a directory (or set ${promotion.DIR_VARIABLE})")
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    args.files = sorted(p for p in args.data.rglob("*") if p.is_file())[rank::world]
    if not args.files:
        parser.error(f"--data: expected files to train on for rank {rank} of {world}; {args.data} has too few")
    return args


def main() -> None:
    args = parse()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        metrics.serve()  # one endpoint per pod, on $AI_STORAGE_METRICS_PORT (9095): the PodMonitor scrapes it
    one_node = int(os.environ.get("LOCAL_WORLD_SIZE", world)) == world  # a landing directory is per node
    landing, durable, promoter = promotion.managers_from_environment(
        keep=args.keep, directory=args.checkpoint_dir, local_dir=None if one_node else ""
    )

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = resume(landing, durable, model, optimizer, rank)
    if (newest := durable.latest()) is not None:
        lag.LAG.durable(newest.step)  # the lag gauges count from the restore point the job already has
    trained = DistributedDataParallel(model) if world > 1 else model
    saves = dist.new_group(backend="gloo") if world > 1 else None  # async saves talk beside the training

    checkpointer = AsyncCheckpointer(landing, max_in_flight=args.max_in_flight, durable=promoter is None)
    if promoter is not None and rank == 0:
        checkpointer.on_saved.append(promoter.wake)
        promoter.start()
    loss = torch.zeros(())
    with checkpointer:
        for inputs, targets in batches(args.files, step):
            if step >= args.steps:
                break
            step += 1
            noisy = inputs + 0.01 * torch.randn_like(inputs)  # uses the RNG: a resume must restore it
            loss = torch.nn.functional.mse_loss(trained(noisy), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            time.sleep(args.step_seconds)
            if step % args.save_every == 0:
                checkpointer.save_dcp(step, training_state(model, optimizer, step, rank), process_group=saves)
    if promoter is not None and rank == 0:
        promoter.close()  # the last landed checkpoint is durable before the job ends
    digest = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
    print(f"rank {rank}: step {step}, loss {loss.item():.6f}, params {digest}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
