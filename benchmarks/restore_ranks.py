#!/usr/bin/env python3
"""Validated restore on two ranks, cold: the library's ``restore`` over a plain ``dcp.load`` of the same checkpoint.

Two ranks (torchrun, gloo, CPU) hold a model and its AdamW state (``--state-mib``, ``checkpoint_staging.py``'s Job:
1 MiB tensors below 1 GiB), replicated as under DDP, and save it once through the library's writer (DCP writes each
tensor once; every rank reads all of it back). Then, ``--repeat`` times after one warm-up, each load in turn: the
page cache dropped (rank 0, both ranks waiting at a barrier), then every rank loads its state: a plain ``dcp.load``
with ``FileSystemReader`` or the library's ``restore`` (rank 0 validates the step's small files, every rank checks
each item as it reads it). A load's time is the slowest rank's. ``--busy N`` runs N spinning processes beside it (a
busy machine). Figures: medians and each sample, the ratio of medians (target 1.15x). Results: ``--out`` (default
benchmarks/results/restore_ranks-cpu-<MiB>mib[-busy].json) with the command line and the machine.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

TARGET = 1.15


def rank_body(args: argparse.Namespace) -> None:
    """One rank: save once, then time the loads; rank 0 writes the results."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from checkpoint_staging import Job, drop_caches
    from torch.distributed.checkpoint import FileSystemReader

    from ai_storage_training.checkpoint.dcp import ManagedWriter
    from ai_storage_training.checkpoint.dcp_reader import restore
    from ai_storage_training.checkpoint.manager import CheckpointManager

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    job = Job(args.state_mib, torch.device("cpu"))  # replicated, as under DDP: DCP writes it once, each rank reads all
    manager = CheckpointManager(args.dir, keep=1)
    dcp.save(job.state(), storage_writer=ManagedWriter(manager, 1))
    path = manager.final_path(1)
    loads = {
        "plain": lambda: dcp.load(job.state(), storage_reader=FileSystemReader(path)),
        "validated": lambda: restore(manager, job.state()),
    }
    times: dict[str, list[float]] = {name: [] for name in loads}
    dropped = True
    for _ in range(args.repeat + 1):
        for name, load in loads.items():
            gc.collect()
            if rank == 0:
                dropped &= drop_caches()
            dist.barrier()
            started = time.perf_counter()
            load()
            took = [0.0] * dist.get_world_size()
            dist.all_gather_object(took, time.perf_counter() - started)
            times[name].append(max(took))
    if rank == 0:
        medians = {name: round(statistics.median(samples[1:]), 4) for name, samples in times.items()}
        ratio = round(medians["validated"] / medians["plain"], 2)
        result = {
            "plain_s": medians["plain"], "validated_s": medians["validated"], "ratio": ratio, "target": TARGET,
            "met": ratio <= TARGET, "cache_dropped": dropped,
            "samples": {name: [round(t, 4) for t in samples[1:]] for name, samples in times.items()},
            "state_mib": round(job.bytes / 2**20), "tensors": len(job.tensors()),
        }  # fmt: skip
        Path(args.result).write_text(json.dumps(result))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-mib", type=int, default=192, help="the model and optimizer state (default 192)")
    parser.add_argument("--repeat", type=int, default=5, help="timed loads of each kind, after one warm-up")
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="where the checkpoint is written")
    parser.add_argument("--busy", type=int, default=0, help="spinning processes beside the ranks (default 0)")
    parser.add_argument("--out", type=Path, help="results file")
    parser.add_argument("--rank-body", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_body:
        rank_body(args)
        return
    if args.state_mib < 2 or args.repeat < 1:
        parser.error("--state-mib: expected at least 2; --repeat: a positive integer")
    busy = "-busy" if args.busy else ""
    out = args.out or REPO / "benchmarks" / "results" / f"restore_ranks-cpu-{args.state_mib}mib{busy}.json"
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        result = Path(root) / "result.json"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", __file__,
                   "--rank-body", f"--state-mib={args.state_mib}", f"--repeat={args.repeat}",
                   f"--dir={Path(root) / 'ckpt'}", f"--result={result}"]  # fmt: skip
        try:
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
            subprocess.run(command, check=True, env=env)
        finally:
            for spinner in spinners:
                spinner.kill()
        found = json.loads(result.read_text())
    results = {
        "command": " ".join(["benchmarks/restore_ranks.py", *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "device": "cpu, 2 ranks (gloo)",
        "cpus": os.cpu_count(),
        "busy_processes": args.busy,
        "restore": found,
    }
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(found))


if __name__ == "__main__":
    main()
