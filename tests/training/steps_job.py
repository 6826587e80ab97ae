"""A small training job timed by the step timer (``ai_storage_training.steps``): a ShardDataset through a DataLoader,
a transform that costs ``--transform-ms`` of CPU per sample, a compute step of ``--compute-ms`` per batch (a
sleep: the host waiting on its GPU), checkpoints through the AsyncCheckpointer every ``--save-every`` steps.

With WORLD_SIZE in the environment each process is a rank (gloo; an all-reduce per step, as DDP does). It resumes
from the newest checkpoint in ``--checkpoint-dir`` (the step timer counts the progress a restart lost), runs
``--steps`` steps (the epochs repeat), then writes its metrics scrape to ``--scrape`` (rank 0: with the ranks sharing
one PROMETHEUS_MULTIPROC_DIR, the job's sums). ``--hang-at N``: print
``reached N`` at step N and keep training slowly (the tests kill it with SIGKILL). Run by the step tests and by
``benchmarks/step_verdicts.py``; set PROMETHEUS_MULTIPROC_DIR to count the workers' reads and transforms.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from prometheus_client import generate_latest
from torch.utils.data import DataLoader

from ai_storage_training import AsyncCheckpointer, CheckpointManager, metrics
from ai_storage_training.data.datasets import ShardDataset
from ai_storage_training.steps import StepTimer


class Busy:
    """A transform that spends ``ms`` of CPU on each sample (decode and augmentation), returning its size."""

    def __init__(self, ms: float):
        self.seconds = ms / 1000

    def __call__(self, sample: dict) -> int:
        until = time.perf_counter() + self.seconds
        while time.perf_counter() < until:
            pass
        return sum(len(v) for k, v in sample.items() if isinstance(v, bytes))


def total(batch: list[int]) -> int:
    return sum(batch)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--transform-ms", type=float, default=0.0)
    ap.add_argument("--compute-ms", type=float, default=5.0)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--checkpoint-dir")
    ap.add_argument("--save-every", type=int, default=0)
    ap.add_argument("--hang-at", type=int, default=0)
    ap.add_argument("--scrape")
    ap.add_argument("--serve-port", type=int, default=0, help="serve the metrics on this port while it runs")
    ap.add_argument("--linger", type=float, default=0.0, help="seconds to keep serving them after the last step")
    ap.add_argument("--start-after", type=float, default=0.0, help="seconds to serve them before the first step")
    args = ap.parse_args()
    if args.serve_port:
        metrics.serve(port=args.serve_port, addr="127.0.0.1")
        time.sleep(args.start_after)  # a scraper sees the counters at 0 first
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("gloo")
    start, manager, saver = 0, None, None
    if args.checkpoint_dir:
        manager = CheckpointManager(args.checkpoint_dir, keep=2)
        saver = AsyncCheckpointer(manager)
        with manager.load() as checkpoint:
            start = checkpoint.step if checkpoint is not None else 0
    dataset = ShardDataset(args.data, shuffle_buffer=16, even=False, transform=Busy(args.transform_ms))
    loader = DataLoader(dataset, batch_size=args.batch, num_workers=args.workers, collate_fn=total)
    timer = StepTimer(start_step=start, log_every=args.log_every, progress_dir=args.checkpoint_dir, record_every=0.05)

    def epochs():
        epoch = 0
        while True:
            dataset.set_epoch(epoch)
            yield from loader
            epoch += 1

    for _ in timer.iterate(epochs()):
        time.sleep(args.compute_ms / 1000)
        if dist.is_initialized():
            dist.all_reduce(torch.ones(1))
        saving = not args.hang_at or timer.step <= args.hang_at  # past it, progress a restart loses
        if saver is not None and saving and args.save_every and timer.step % args.save_every == 0:
            saver.save(timer.step, {"model.bin": os.urandom(64 * 1024)})
        if args.hang_at and timer.step == args.hang_at:
            print(f"reached {timer.step}", flush=True)
        if args.hang_at and timer.step >= args.hang_at:
            time.sleep(0.05)
        elif timer.step >= start + args.steps:
            break
    if saver is not None:
        saver.close()
    if dist.is_initialized():
        dist.barrier()  # every rank has counted its steps (a shared PROMETHEUS_MULTIPROC_DIR: the job's sums)
    if args.scrape and (not dist.is_initialized() or dist.get_rank() == 0):
        Path(args.scrape).write_bytes(generate_latest(metrics.registry()))
    print(f"figures {timer.figures()}", flush=True)
    time.sleep(args.linger)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
