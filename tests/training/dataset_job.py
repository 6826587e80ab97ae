"""One rank of a training-like job over a ShardDataset (the tests run 2 of them with gloo): a StatefulDataLoader
with 2 workers, batches of sample keys. Rank and world size come from torch.distributed (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT in the environment).

- ``epoch``: read one epoch, print the keys (a JSON list, in the order the loader gave them); with
  ``--allreduce``, all-reduce a tensor after every batch, as DDP does with the gradients.
- ``save``: after ``--after`` batches, save the loader's state to ``--state`` (and the keys so far beside it),
  print ``saved``, then keep reading slowly and never exit (the test kills it with SIGKILL).
- ``resume``: load ``--state``, read to the end of the epoch, print the keys.
- ``metrics``: serve the metrics, read one epoch, print the scrape of this process's /metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import torch
import torch.distributed as dist
from torchdata.stateful_dataloader import StatefulDataLoader

from ai_storage_training import metrics
from ai_storage_training.data.datasets import ShardDataset


def keys(batch: list[dict]) -> list[str]:
    return [sample["__key__"] for sample in batch]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["epoch", "save", "resume", "metrics"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--epoch", type=int, default=0)
    ap.add_argument("--state")
    ap.add_argument("--after", type=int, default=3)
    ap.add_argument("--allreduce", action="store_true")
    ap.add_argument("--context", choices=["fork", "forkserver", "spawn"], help="the DataLoader workers' start method")
    ap.add_argument("--no-rank-env", action="store_true", help="drop RANK and WORLD_SIZE once the group is up")
    args = ap.parse_args()
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    if args.no_rank_env:  # as after init_process_group(rank=..., world_size=...): only torch.distributed knows
        del os.environ["RANK"], os.environ["WORLD_SIZE"]
    dataset = ShardDataset(args.data, seed=args.seed, shuffle_buffer=8)
    dataset.set_epoch(args.epoch)
    loader = StatefulDataLoader(
        dataset, batch_size=3, num_workers=2, collate_fn=keys, multiprocessing_context=args.context
    )
    if args.mode == "metrics":
        server = metrics.serve(port=0, addr="127.0.0.1")
        list(loader)
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as r:
            print(r.read().decode())
        return 0
    if args.mode == "resume":
        loader.load_state_dict(torch.load(args.state))
    seen: list[str] = []
    for n, batch in enumerate(loader, start=1):
        seen += batch
        if args.allreduce:
            dist.all_reduce(torch.ones(1))
        if args.mode == "save" and n == args.after:
            torch.save(loader.state_dict(), args.state + ".tmp")
            os.replace(args.state + ".tmp", args.state)
            Path(args.state + ".keys").write_text(json.dumps(seen))
            print("saved", flush=True)
        if args.mode == "save" and n > args.after:
            time.sleep(0.2)
    if args.mode == "save":
        time.sleep(3600)
    print(json.dumps(seen))
    if distributed:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
