"""Sharded checkpoints written through the training library's CheckpointManager, as a training job writes them
to the checkpoint tier (the layout is ``ai_storage_training.checkpoint.layout``: this module adds shards and a
manifest).

Under a checkpoint root::

    .step-00000010.tmp-<token>/   in flight: shards + manifest.json (never read by a restore)
    step-00000010/                promoted: shard-00000-of-00008.bin ... manifest.json COMPLETE

The manager writes the shards and ``manifest.json`` (sizes and sha256 of every shard) into the staging
directory, fsyncs them, renames it, and writes ``COMPLETE`` last. :func:`verify` also checks every shard
against the manifest.

Run as a program it is the process a test kills or keeps waiting: ``write`` writes one sharded checkpoint,
``save-forever`` saves checkpoints of :func:`write_parts` with a CheckpointManager one step after another,
``lease`` holds a read lease on a step until its stdin closes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, when run as a program

from ai_storage_training import CheckpointManager
from ai_storage_training.checkpoint import layout
from ai_storage_training.checkpoint.manager import is_complete

MARKER = layout.MARKER
MANIFEST = "manifest.json"
CHUNK = 4 * 1024 * 1024


def final_dir(root: Path, step: int) -> Path:
    return Path(root) / layout.step_dir(step)


def shard_name(i: int, n: int) -> str:
    return f"shard-{i:05d}-of-{n:05d}.bin"


def _write_file(path: Path, data: bytes | memoryview) -> None:
    view = memoryview(data)
    with open(path, "wb", buffering=0) as f:
        for off in range(0, len(view), CHUNK):
            f.write(view[off : off + CHUNK])


def write_checkpoint(
    root: Path,
    step: int,
    shards: list[bytes],
    *,
    workers: int | None = None,
    digests: list[str] | None = None,
    stall_after: int | None = None,
    stall_seconds: float = 60.0,
    progress=None,
) -> Path:
    """Write ``shards`` (one per rank) as checkpoint ``step`` under ``root``; return the final directory.

    ``digests`` may carry the shards' sha256 hex digests when the caller already has them (a trainer
    hashes while it serializes); otherwise they are computed here.
    ``stall_after=K`` (test hook) makes every shard with index >= K wait ``stall_seconds`` before it is
    written, so a test can kill the writer at a known point: K shards on disk, the rest missing.
    """
    n = len(shards)
    digests = digests or [hashlib.sha256(s).hexdigest() for s in shards]

    def write(staging: Path) -> None:
        def write_one(i: int) -> None:
            if stall_after is not None and i >= stall_after:
                if progress:
                    progress(f"stalled before shard {i}")
                time.sleep(stall_seconds)
            _write_file(staging / shard_name(i, n), shards[i])
            if progress:
                progress(f"wrote shard {i}")

        with ThreadPoolExecutor(max_workers=workers or n) as pool:
            list(pool.map(write_one, range(n)))
        manifest = {
            "step": step,
            "shards": [
                {"name": shard_name(i, n), "bytes": len(s), "sha256": d}
                for i, (s, d) in enumerate(zip(shards, digests))
            ],
        }
        _write_file(staging / MANIFEST, json.dumps(manifest, indent=1).encode())

    final = CheckpointManager(root, keep=None).save(step, write).path
    if progress:
        progress("complete")
    return final


def verify(ckpt: Path, *, hashes: bool = True) -> bool:
    """True when ``ckpt`` is complete (its marker and every file it lists) and every shard matches the manifest."""
    ckpt = Path(ckpt)
    if not is_complete(ckpt):
        return False
    manifest = json.loads((ckpt / MANIFEST).read_text())
    for shard in manifest["shards"]:
        path = ckpt / shard["name"]
        if not path.is_file() or path.stat().st_size != shard["bytes"]:
            return False
        if hashes:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
            if h.hexdigest() != shard["sha256"]:
                return False
    return True


def list_checkpoints(root: Path) -> list[Path]:
    """Promoted checkpoint directories (complete or not), oldest step first."""
    return sorted(p for p in Path(root).glob(layout.STEP_GLOB) if p.is_dir())


def latest_complete(root: Path, *, hashes: bool = True) -> Path | None:
    """The newest checkpoint that has its marker and verifies; None if there is none."""
    for ckpt in reversed(list_checkpoints(root)):
        if verify(ckpt, hashes=hashes):
            return ckpt
    return None


def clean_incomplete(root: Path) -> list[Path]:
    """Remove in-flight staging directories and promoted directories without a marker (the manager's clean)."""
    return CheckpointManager(root, keep=None).clean()


def write_parts(directory: Path, parts: int = 6) -> None:
    """Parts of random bytes and, last, their sha256 digests: a checkpoint cut short lacks some."""
    sums = {}
    for i in range(parts):
        data = os.urandom(512 * 1024 + i * 4096)
        (directory / f"part-{i}.bin").write_bytes(data)
        sums[f"part-{i}.bin"] = hashlib.sha256(data).hexdigest()
    (directory / "digests.json").write_text(json.dumps(sums))


def intact(path: Path, parts: int = 6) -> bool:
    """Every part :func:`write_parts` wrote is there with its bytes."""
    try:
        sums = json.loads((Path(path) / "digests.json").read_text())
    except (OSError, ValueError):
        return False
    return len(sums) == parts and all(
        hashlib.sha256((Path(path) / n).read_bytes()).hexdigest() == d for n, d in sums.items()
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="write one sharded checkpoint (the process a test kills)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("--root", required=True, type=Path)
    w.add_argument("--step", required=True, type=int)
    w.add_argument("--shards", type=int, default=4)
    w.add_argument("--shard-mib", type=float, default=1.0)
    w.add_argument("--stall-after", type=int, default=None)
    w.add_argument("--stall-seconds", type=float, default=60.0)
    forever = sub.add_parser("save-forever")
    forever.add_argument("--root", required=True, type=Path)
    forever.add_argument("--step", required=True, type=int)
    forever.add_argument("--keep", type=int, default=3)
    lease = sub.add_parser("lease")
    lease.add_argument("--root", required=True, type=Path)
    lease.add_argument("--step", required=True, type=int)
    args = ap.parse_args(argv)
    if args.cmd == "save-forever":
        manager = CheckpointManager(args.root, keep=args.keep)
        print("ready", flush=True)
        for step in range(args.step, sys.maxsize):
            manager.save(step, write_parts)
    if args.cmd == "lease":
        with CheckpointManager(args.root).load(step=args.step) as checkpoint:
            print("reading", checkpoint.step, flush=True)
            sys.stdin.read()
            print("intact" if intact(checkpoint.path) else "torn", flush=True)
        return 0
    size = int(args.shard_mib * 1024 * 1024)
    shards = [os.urandom(size) for _ in range(args.shards)]

    lock = threading.Lock()

    def progress(msg: str) -> None:
        with lock:  # shard threads report concurrently; keep one message per line
            sys.stdout.write(msg + "\n")
            sys.stdout.flush()

    final = write_checkpoint(
        args.root, args.step, shards, stall_after=args.stall_after, stall_seconds=args.stall_seconds, progress=progress
    )
    print(f"done {final}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
