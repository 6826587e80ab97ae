"""The doctor's read tests: which files it reads, sequential and random reads (fio or Python), read-ahead."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

from ..data import MANIFEST, DatasetError, Manifest, PrefetchingReader, load_manifest
from .fio import FioError, fio_reads, fio_safe

MIB = 1024 * 1024
RANDOM_BLOCK = 256 * 1024
FIO_MIN_FILE = 4096
"""fio reads whole blocks of at least 4 KiB: smaller files are left to the Python reads."""
PREFETCH_MAX_FILE = 64 * MIB
PREFETCH_MIN_FILES = 20
PREFETCH_MIN_SHARDS = 4
"""A packed dataset's first shard is the job's start (not counted): three reads of the job's read-ahead at least."""
SHARD_READAHEAD = 2
"""Shards a ShardDataset reads ahead by default (``readahead``), with one thread."""


def drop_cache(path: Path) -> None:
    """Ask the kernel to forget ``path``'s cached pages, so a read reaches the filesystem (best effort)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def data_files(root: Path, budget: int) -> list[Path]:
    """Regular files under ``root`` (hidden ones and hidden directories left out), in name order, until their
    sizes reach ``budget`` bytes."""
    chosen, total = [], 0
    for directory, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(directory, name)
            if name.startswith(".") or not path.is_file() or path.is_symlink():
                continue
            size = path.stat().st_size
            if size == 0:
                continue
            chosen.append(path)
            total += size
            if total >= budget:
                return chosen
    return chosen


def _block(files: list[Path], wanted: int) -> int:
    """``wanted``, or less when a file is smaller (fio skips files shorter than a block), in 4 KiB steps."""
    smallest = min(f.stat().st_size for f in files)
    return max(FIO_MIN_FILE, min(wanted, smallest) // FIO_MIN_FILE * FIO_MIN_FILE)


def python_reads(files: list[Path], budget: int) -> dict[str, Any]:
    """Sequential 1 MiB and random 256 KiB reads of ``files`` in Python, caches dropped first."""
    for f in files:
        drop_cache(f)
    done, started = 0, time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as handle:
            while done < budget and (chunk := handle.read(MIB)):
                done += len(chunk)
    sequential = done / max(time.perf_counter() - started, 1e-9) / 1e6
    for f in files:
        drop_cache(f)
    sizes = [(f, f.stat().st_size) for f in files]
    ops = max(1, min(256, budget // RANDOM_BLOCK))
    rng = random.Random(0)
    started = time.perf_counter()
    for _ in range(ops):
        path, size = rng.choice(sizes)
        offset = rng.randrange(0, max(1, size - RANDOM_BLOCK + 1))
        fd = os.open(path, os.O_RDONLY)
        try:
            os.pread(fd, RANDOM_BLOCK, offset)
        finally:
            os.close(fd)
    elapsed = max(time.perf_counter() - started, 1e-9)
    return {
        "tool": "python",
        "block_bytes": {"sequential": MIB, "random": RANDOM_BLOCK},
        "sequential_mb_s": round(sequential, 1),
        "random_iops": round(ops / elapsed, 1),
        "random_latency_ms": round(1000 * elapsed / ops, 3),
    }


def read_tests(files: list[Path], budget: int, use_fio: bool) -> dict[str, Any]:
    """Sequential 1 MiB and random 256 KiB reads of ``files`` (at most ``budget`` bytes each). fio reads the
    files of 4 KiB or more whose names its job file takes, with smaller blocks when a file is smaller than one;
    when fio fails, Python measures and ``fio_error`` says why."""
    size = sum(f.stat().st_size for f in files)
    fio_files = [f for f in files if f.stat().st_size >= FIO_MIN_FILE and fio_safe(f)]
    fio_error = None
    if use_fio and fio_files:
        try:
            figures = fio_reads(fio_files, budget, _block(fio_files, MIB), _block(fio_files, RANDOM_BLOCK))
            return {"files": len(files), "bytes": size, **figures}
        except FioError as e:
            fio_error = str(e)
    figures = python_reads(files, budget)
    return {"files": len(files), "bytes": size, **figures, **({"fio_error": fio_error} if fio_error else {})}


def prefetch_test(root: Path, files: list[Path], step_ms: float, budget: int) -> dict[str, Any]:
    """Read ``files`` (those up to 64 MiB) with the PrefetchingReader as a job spending ``step_ms`` per file; a
    packed dataset (``root`` holds a manifest) as its ShardDataset reads it (:func:`shard_prefetch_test`)."""
    if (root / MANIFEST).is_file():
        try:
            manifest = load_manifest(root)
        except DatasetError as error:
            return {"skipped": f"a packed dataset whose manifest is refused: {error}"}
        return shard_prefetch_test(root, manifest, budget, step_ms)
    small = [f for f in files if f.stat().st_size <= PREFETCH_MAX_FILE]
    if len(small) < PREFETCH_MIN_FILES:
        return {"skipped": f"{len(small)} data files of 64 MiB or less: too few for a hit ratio (20 needed)"}
    for f in small:
        drop_cache(f)
    reader = PrefetchingReader(small, depth=8, workers=4)
    for _ in reader:
        time.sleep(step_ms / 1000)
    return {
        "files": len(small),
        "depth": reader.depth,
        "step_ms": step_ms,
        "hits": reader.hits,
        "misses": reader.misses,
        "hit_ratio_percent": round(100 * reader.hit_ratio, 1),
    }


def shard_prefetch_test(root: Path, manifest: Manifest, budget: int, step_ms: float) -> dict[str, Any]:
    """A packed dataset's shards read as ShardDataset reads them (``SHARD_READAHEAD`` ahead, one thread) by a job
    spending ``step_ms`` per sample (a file before packing), until ``budget`` bytes; the first shard not counted."""
    count = total = 0  # the manifest's first shards up to the budget
    for shard in manifest.shards:
        if total >= budget and count >= PREFETCH_MIN_SHARDS:
            break
        count, total = count + 1, total + shard.size
    shards = manifest.shards[:count]
    if len(shards) < PREFETCH_MIN_SHARDS:
        return {"skipped": f"{manifest.describe()} has {len(shards)} shards: too few for a hit ratio (4 needed)"}
    paths = [root / shard.name for shard in shards]
    for path in paths:
        drop_cache(path)
    reader = PrefetchingReader(paths, depth=SHARD_READAHEAD, workers=1)
    start = (0, 0)
    for i, _ in enumerate(reader):
        if i == 0:
            start = (reader.hits, reader.misses)  # the job's start: its first shard could not be read ahead
        time.sleep(shards[i].samples * step_ms / 1000)
    hits, misses = reader.hits - start[0], reader.misses - start[1]
    return {
        "layout": "packed",
        "shards": len(paths),
        "depth": reader.depth,
        "step_ms": step_ms,
        "hits": hits,
        "misses": misses,
        "hit_ratio_percent": round(100 * hits / (hits + misses), 1),
    }
