#!/usr/bin/env python3
"""What the checkpoint manager's CRC32C costs, on a local disk (the data-path figures are in checkpoints.py).

With a state of --state-mib in 4 float32 tensors, the median of --repeat runs of:

1. dcp_write: ``dcp.save`` through the manager's writer (CRC32C of every byte as it is written, staging, manifest,
   marker) over ``dcp.save`` through DCP's own FileSystemWriter (fsync of each file too, nothing else);
2. save_readback: ``CheckpointManager.save`` of the same bytes as 4 files (CRC32C read back after each fsync,
   while the bytes are in the page cache) over writing + fsyncing the same files;
3. validate: ``validate(step)`` with verify="crc32c" (every byte read and summed) and verify="size" (a stat per
   file) over a plain read of the same files, each with the files' pages dropped first (posix_fadvise).

Results go to benchmarks/results/checksum_cost.json with the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402

from ai_storage_training import Checkpoint, CheckpointManager  # noqa: E402
from ai_storage_training.checkpoint.dcp import ManagedWriter  # noqa: E402


def median_seconds(repeat: int, setup: Callable[[], object], run: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        setup()
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def drop(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def read_all(directory: Path) -> None:
    for path in directory.rglob("*"):
        if path.is_file():
            with open(path, "rb", buffering=0) as f:
                while f.read(8 << 20):
                    pass


def compared(plain: float, managed: float) -> dict[str, float]:
    """Both medians and their ratio, as the results file records them."""
    return {"plain_s": round(plain, 3), "managed_s": round(managed, 3), "ratio": round(managed / plain, 2)}


def validation(root: Path, checkpoint: Checkpoint, repeat: int) -> dict[str, float]:
    """Full (CRC32C) and size-only validation of ``checkpoint`` against a plain read, page cache dropped each time."""
    validated = {}
    for verify in ("crc32c", "size"):
        m = CheckpointManager(root / "m", keep=1, verify=verify)
        validated[verify] = median_seconds(repeat, lambda: drop(checkpoint.path), lambda m=m: m.validate(0))
    plain_read = median_seconds(repeat, lambda: drop(checkpoint.path), lambda: read_all(checkpoint.path))
    return {
        "plain_read_s": round(plain_read, 3),
        "crc32c_s": round(validated["crc32c"], 3),
        "size_s": round(validated["size"], 4),
        "crc32c_ratio": round(validated["crc32c"] / plain_read, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    root = Path(tempfile.mkdtemp(dir=args.dir))
    state = {f"t{i}": torch.rand(args.state_mib * (1 << 18) // 4) for i in range(4)}
    blobs = {name: tensor.numpy().tobytes() for name, tensor in state.items()}
    step = iter(range(1_000_000))

    def fresh() -> None:
        shutil.rmtree(root / "m", ignore_errors=True)
        shutil.rmtree(root / "p", ignore_errors=True)

    manager = lambda: CheckpointManager(root / "m", keep=None)  # noqa: E731 (no retention inside the timings)
    out: dict[str, object] = {"command": " ".join(sys.argv), "state_mib": args.state_mib, "repeat": args.repeat}
    plain_dcp = median_seconds(
        args.repeat, fresh, lambda: dcp.save(state, storage_writer=dcp.FileSystemWriter(root / "p"))
    )
    managed_dcp = median_seconds(
        args.repeat, fresh, lambda: dcp.save(state, storage_writer=ManagedWriter(manager(), next(step)))
    )

    def plain_files() -> None:
        (root / "p").mkdir()
        for name, blob in blobs.items():
            with open(root / "p" / name, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())

    def write_files(directory: Path) -> None:
        for name, blob in blobs.items():
            (directory / name).write_bytes(blob)

    plain_save = median_seconds(args.repeat, fresh, plain_files)
    managed_save = median_seconds(args.repeat, fresh, lambda: manager().save(next(step), write_files))
    out["dcp_write"] = compared(plain_dcp, managed_dcp)
    out["save_readback"] = compared(plain_save, managed_save)
    fresh()
    out["validate"] = validation(root, manager().save(0, write_files), args.repeat)
    shutil.rmtree(root)
    print(json.dumps(out, indent=2))
    (REPO / "benchmarks" / "results" / "checksum_cost.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
