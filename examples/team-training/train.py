"""The team's training entry point (the job runs it as /app/train.py in its image, under torchrun): a small PyTorch
model trained with AdamW under DDP, checkpointed asynchronously through torch.distributed.checkpoint (DCP) and the
training library: model, optimizer, step, and every rank's RNG states and data position. It resumes from the
newest checkpoint that validates, so a job killed at any moment goes on from there ($AI_STORAGE_REQUIRE_CHECKPOINT=1:
fail instead of starting over when there is none, e.g. an unmounted volume).

On a GPU node each rank trains on cuda:$LOCAL_RANK (model, optimizer state, batches from pinned host memory),
with NCCL for CUDA tensors and gloo for CPU ones in one process group ("cpu:gloo,cuda:nccl"), and a gloo group of
its own for the checkpoint saves; without CUDA it is the same job on the CPU over gloo.

Checkpoints go to --checkpoint-dir (default $AI_STORAGE_CHECKPOINT_DIR); with $AI_STORAGE_CHECKPOINT_LOCAL_DIR
(a node-local volume of the hot tier) they land there, and each node's first rank promotes its node's share to the
durable directory in the background (over several nodes the step commits there once every node's share is in).

Data: a packed dataset version (``python -m ai_storage_training pack``: manifest.json + WebDataset shards), the
directory $AI_STORAGE_DATASET_DIR names when set (the copy the platform staged and verified on the hot tier), else
--data. Each rank reads its share through the library's ShardDataset in a torchdata StatefulDataLoader with
--workers processes, epoch after epoch. Its position (the library's DataPosition: the epoch and every rank's workers'
progress through it) is in every checkpoint, one entry for all ranks, so a resumed job continues mid-epoch with no
sample repeated or skipped, on the same number of ranks or another (model and optimizer reshard through DCP).
The last line of each rank reads ``rank R: step S, loss L, params P, samples N, keys K`` (P: a digest of the
model's parameters; N and K: how many samples this rank trained on since step 0, and a digest of their keys in
order, carried through every resume).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel
from torchdata.stateful_dataloader import StatefulDataLoader

from ai_storage_training import metrics
from ai_storage_training.checkpoint import lag, promotion
from ai_storage_training.checkpoint.async_save import AsyncCheckpointer, CheckpointSaveError
from ai_storage_training.checkpoint.claim import DirectoryInUseError, LauncherError
from ai_storage_training.checkpoint.commit import read_marker
from ai_storage_training.checkpoint.dcp import restore
from ai_storage_training.data.datasets import ShardDataset
from ai_storage_training.data.manifest import DIR_VARIABLE
from ai_storage_training.data.position import DataPosition
from ai_storage_training.steps import StepTimer

FEATURES, BATCH = 16, 8


def features(sample: dict[str, Any]) -> tuple[str, torch.Tensor]:
    """A sample (a WebDataset dict) as its key and FEATURES inputs in [0, 1]: its bytes (every member, in name
    order) repeated to FEATURES. Runs in the DataLoader's workers."""
    data = b"".join(value for name, value in sorted(sample.items()) if not name.startswith("__")) or b"\0"
    raw = (data * (FEATURES // len(data) + 1))[:FEATURES]
    return sample["__key__"], torch.frombuffer(bytearray(raw), dtype=torch.uint8).float() / 255


class Trained:
    """The samples this rank trained on since step 0: their count and a digest of their keys in order (kept through
    a resume on the same ranks; on another layout each rank starts its own count again)."""

    def __init__(self, record: Path | None):
        self.samples, self.keys, self.record = 0, "", record
        if record is not None:
            record.parent.mkdir(parents=True, exist_ok=True)

    def trained_on(self, keys: list[str], epoch: int) -> None:
        self.samples += len(keys)
        self.keys = hashlib.sha256("\n".join([self.keys, *keys]).encode()).hexdigest()
        if self.record is not None:
            with self.record.open("a") as out:
                out.writelines(f"{epoch} {key}\n" for key in keys)

    def state_dict(self) -> dict[str, Any]:
        return {"samples": self.samples, "keys": self.keys}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.samples, self.keys = int(state["samples"]), str(state["keys"])


def training_state(model, optimizer, step: int, rank: int, world: int, position: DataPosition, trained: Trained):
    """What a checkpoint holds: DCP's model and optimizer state dicts (DCP reshards them), the step, the data position
    (one entry for every rank: any layout resumes it), and this rank's RNG states (the CPU's, and its GPU's under
    CUDA) and samples trained, under keys naming the rank and the world size: only the same layout reloads them."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {
        "model": model_state,
        "optim": optim_state,
        "train": {"step": step},
        DataPosition.KEY: position,
        f"rng-{rank}-of-{world}": torch.get_rng_state(),
        f"trained-{rank}-of-{world}": trained,
    }
    if torch.cuda.is_available():
        state[f"cuda-rng-{rank}-of-{world}"] = torch.cuda.get_rng_state()
    return state


def resume(landing, durable, model, optimizer, rank: int, position: DataPosition, trained: Trained) -> int:
    """Load the newest checkpoint that validates, a local one first (promotion.restore_manager, decided by rank 0
    for every rank), each item verified as it is read; return its step (0 on a first start). Saved on another number
    of ranks, the model, optimizer and data position reshard; each rank's RNG starts from its seed again (said)."""
    local = None if landing is durable or landing.node_ranks is not None else landing  # many nodes: the durable one
    use_local = [rank == 0 and local is not None and promotion.restore_manager(local, durable) is local]
    world = dist.get_world_size() if dist.is_initialized() else 1
    if dist.is_initialized():
        dist.broadcast_object_list(use_local, src=0)
    state: dict[str, Any] = {}
    same = [True]

    def loadable(checkpoint) -> dict[str, Any]:  # made only when there is one (get_state_dict fills AdamW's state)
        marker = read_marker(checkpoint.path)
        saved_on = marker.world_size if marker is not None else world
        state.update(training_state(model, optimizer, -1, rank, saved_on, position, trained))
        same[0] = saved_on == world
        if not same[0]:  # another layout: this rank's own entries are not in the checkpoint
            for key in [k for k in state if k.startswith(("rng-", "cuda-rng-", "trained-"))]:
                del state[key]
            if rank == 0:
                print(
                    f"resuming a checkpoint of {saved_on} rank(s) on {world}: each rank's RNG starts again", flush=True
                )
        return state

    if restore(landing if use_local[0] else durable, loadable) is None:  # and position.load_state_dict
        return 0
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    if same[0]:
        torch.set_rng_state(state[f"rng-{rank}-of-{world}"])
        if torch.cuda.is_available():
            torch.cuda.set_rng_state(state[f"cuda-rng-{rank}-of-{world}"])
    return int(state["train"]["step"])


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data",
        type=Path,
        help=f"the packed dataset version to train on (manifest.json + shards); ${DIR_VARIABLE} wins when set",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=os.environ.get(promotion.DIR_VARIABLE) or None,
        help=f"this run's durable checkpoints (default ${promotion.DIR_VARIABLE})",
    )
    parser.add_argument("--workers", type=int, default=2, help="DataLoader worker processes per rank (0: none)")
    parser.add_argument("--steps", type=int, default=1000, help="step to stop at")
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--keep", type=int, default=3, help="durable checkpoints to keep")
    parser.add_argument("--max-in-flight", type=int, default=1, help="checkpoint saves running at once")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="extra time per step (tests: a slow job)")
    parser.add_argument("--log-every", type=int, default=100, help="steps between the step timer's log lines")
    parser.add_argument(
        "--record-keys", type=Path, help="append 'EPOCH KEY' of each trained sample to DIR/rank-R.txt (tests)"
    )
    args = parser.parse_args()
    for name in ("steps", "save_every", "keep", "max_in_flight", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: expected a positive integer; got {getattr(args, name)}")
    if args.workers < 0:
        parser.error(f"--workers: expected an integer >= 0; got {args.workers}")
    if args.checkpoint_dir is None:
        parser.error(f"--checkpoint-dir: expected a directory (or set ${promotion.DIR_VARIABLE})")
    args.dataset = open_dataset(parser, args)
    return args


def open_dataset(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ShardDataset:
    """This rank's reader of the dataset version; refused (one line) unless it is a packed version whose shards
    give every worker of every rank at least one."""
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    staged = os.environ.get(DIR_VARIABLE)
    name, directory = (f"${DIR_VARIABLE}", staged) if staged else ("--data", args.data)
    if not directory:
        parser.error(f"--data: expected a packed dataset version's directory (or set ${DIR_VARIABLE}); got none")
    try:
        dataset = ShardDataset(directory, rank=rank, world_size=world, transform=features)
    except ValueError as e:  # the manifest is missing, truncated or not the one expected
        parser.error(f"{name}: expected a packed dataset version (python -m ai_storage_training pack); {e}")
    readers = world * max(1, args.workers)
    if len(dataset.manifest.shards) < readers:
        parser.error(
            f"{name}: expected at least {readers} shards ({world} ranks x {max(1, args.workers)} workers); "
            f"{directory} has {len(dataset.manifest.shards)} (pack it with a smaller --shard-mib, or fewer --workers)"
        )
    return dataset


def train(args: argparse.Namespace, model, optimizer, position: DataPosition, seen: Trained, step: int, save):
    """Train from ``step`` to --steps, epoch after epoch (a resumed loader first finishes its epoch), calling
    ``save(step, loss)`` every --save-every steps; return the last step and loss."""
    device = next(model.parameters()).device
    loss = torch.zeros(())
    timer = StepTimer(
        start_step=step, log_every=args.log_every, progress_dir=args.checkpoint_dir
    )  # where each step's time goes (docs/training.md)
    while step < args.steps:
        args.dataset.set_epoch(position.epoch)
        for keys, batch in timer.iterate(position.loader):
            step += 1
            seen.trained_on(keys, position.epoch)
            inputs = batch.to(device, non_blocking=True)  # from pinned memory under CUDA
            noisy = inputs + 0.01 * torch.randn_like(inputs)  # uses the RNG: a resume must restore it
            loss = torch.nn.functional.mse_loss(model(noisy), inputs.mean(dim=1, keepdim=True))
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            time.sleep(args.step_seconds)
            if step % args.save_every == 0:
                save(step, loss)
            if step >= args.steps:
                break
        else:
            position.epoch += 1
    return step, loss.item()


def main() -> None:
    args = parse()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)  # one GPU per rank: NCCL refuses two ranks on one device
    if world > 1:  # NCCL for the training's CUDA tensors, gloo for CPU ones (DCP's objects, the loader's state)
        dist.init_process_group("cpu:gloo,cuda:nccl" if cuda else "gloo")
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        metrics.serve()  # one endpoint per pod, on $AI_STORAGE_METRICS_PORT (9095): the PodMonitor scrapes it
    landing, durable, promoter = promotion.managers_from_environment(keep=args.keep, directory=args.checkpoint_dir)
    first_on_node = int(os.environ.get("LOCAL_RANK", "0")) == 0  # runs the node's promoter

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(FEATURES, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    # Its own generator: the loader's draws (its workers' seeds) leave the training's RNG alone. Workers start from
    # a fork server, not by forking this process: its checkpoint, promotion and metrics threads may hold a lock at
    # the moment of a fork, and a forked worker would wait on it for ever (a 2-rank run hung once in a full test run).
    loader = StatefulDataLoader(
        args.dataset,
        batch_size=BATCH,
        num_workers=args.workers,
        generator=torch.Generator().manual_seed(0),
        multiprocessing_context="forkserver" if args.workers else None,
        persistent_workers=args.workers > 0,  # started once, not at every epoch
        pin_memory=cuda,  # batches copied to the GPU without blocking
    )
    print(f"rank {rank}: training on {device}", flush=True)
    saves = dist.new_group(backend="gloo") if world > 1 else None  # async saves talk beside the training
    position = DataPosition(loader, group=saves)  # gathered over gloo: the default group may be NCCL
    seen = Trained(args.record_keys / f"rank-{rank}.txt" if args.record_keys else None)
    # Claims the checkpoint directory (rank 0) before anything else: a second job on it is refused here, naming it.
    checkpointer = AsyncCheckpointer(landing, max_in_flight=args.max_in_flight, durable=promoter is None)
    step = resume(landing, durable, model, optimizer, rank, position, seen)
    if step:
        print(f"rank {rank}: resumed at step {step}, epoch {position.epoch}, samples {seen.samples}", flush=True)
    if (newest := durable.latest()) is not None:
        lag.LAG.durable(newest.step)  # the lag gauges count from the restore point the job already has
    trained = DistributedDataParallel(model, device_ids=[device] if cuda else None) if world > 1 else model

    if promoter is not None and first_on_node:
        checkpointer.on_saved.append(promoter.wake)
        promoter.start()

    def save(at: int, loss: torch.Tensor) -> None:
        recorded = {"loss": loss.item(), "samples": seen.samples}  # rank 0's go into the marker (`list`)
        state = training_state(model, optimizer, at, rank, world, position, seen)
        checkpointer.save_dcp(at, state, process_group=saves, metrics=recorded)

    with checkpointer:
        step, loss = train(args, trained, optimizer, position, seen, step, save)
    if promoter is not None and first_on_node:
        promoter.close()  # the last landed checkpoint is durable before the job ends
    digest = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())).hexdigest()[:16]
    print(
        f"rank {rank}: step {step}, loss {loss:.6f}, params {digest}, samples {seen.samples}, keys {seen.keys[:16]}",
        flush=True,
    )
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except (CheckpointSaveError, DirectoryInUseError, LauncherError) as error:  # the library's line says it all
        sys.exit(f"rank {os.environ.get('RANK', '0')}: {error}")
