"""The team's training entry point (the job runs it as /app/train.py in its image): resume from the newest
complete checkpoint and its data position, read the dataset with read-ahead, save every --save-every steps,
export the metrics.

The "model" here is a running byte count so the example runs anywhere; a real job keeps the same calls and puts
``torch.save(model.state_dict(), directory / "model.pt")`` in ``save_state`` and ``torch.load`` in
``load_state``. Under torchrun every rank reads its own share of the files; rank 0 alone saves.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from ai_storage_training import CheckpointManager, PrefetchingReader, metrics


def save_state(directory: Path, state: dict[str, int]) -> None:
    (directory / "state.json").write_text(json.dumps(state))


def load_state(directory: Path) -> dict[str, int]:
    return json.loads((directory / "state.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="dataset directory (the cold-tier claim)")
    parser.add_argument("--checkpoint-dir", type=Path, required=True, help="this run's checkpoints")
    parser.add_argument("--steps", type=int, default=1000, help="step to stop at")
    parser.add_argument("--save-every", type=int, default=100)
    parser.add_argument("--keep", type=int, default=3, help="complete checkpoints to keep")
    args = parser.parse_args()
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    files = sorted(p for p in args.data.rglob("*") if p.is_file())[rank::world]
    if not files:
        parser.error(f"--data: expected files to train on for rank {rank} of {world}; {args.data} has too few")
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        metrics.serve()  # one endpoint per pod, on $AI_STORAGE_METRICS_PORT (9095): the PodMonitor scrapes it

    manager = CheckpointManager(args.checkpoint_dir, keep=args.keep)
    with manager.load() as checkpoint:  # None on a first start
        state = load_state(checkpoint.path) if checkpoint else {"step": 0, "bytes_seen": 0}

    while state["step"] < args.steps:
        # The data position resumes with the checkpoint: one file per step, so the next file is step % len(files)
        # (a packed dataset keeps its position in ShardDataset's state instead: docs/training.md, Datasets).
        for _, sample in PrefetchingReader(files[state["step"] % len(files) :], depth=16, workers=4):
            state["step"] += 1
            state["bytes_seen"] += len(sample)  # the training step
            if rank == 0 and state["step"] % args.save_every == 0:
                manager.save(state["step"], lambda directory: save_state(directory, state))
            if state["step"] >= args.steps:
                break
    print(f"rank {rank}: step {state['step']}, {state['bytes_seen']} bytes seen", flush=True)


if __name__ == "__main__":
    main()
