"""The read side of the data-path benchmark (``datapath.py``): parallel readers, the dataset writer, and one
measured cycle of cold, warm, hot and limit passes on a fresh mount with an empty cache.

Importing it puts the repository and the data-path test harness (tests/datapath) on ``sys.path``, as
``datapath.py`` does, so a new benchmark can import these helpers (or ``datapath``'s) directly.
"""

from __future__ import annotations

import os
import queue
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "datapath"), str(REPO / "benchmarks")]  # components, harness

import harness  # noqa: E402

MB = 1e6
MIB = 1024 * 1024
PASS_TIMEOUT = 600.0  # a read pass through FUSE that takes longer than this aborts the mount
PASSES = ("cold", "warm", "hot", "limit")


def _drain(work: queue.Queue[Path], kind: str, read_bytes: int) -> int:
    """Read the files of ``work`` until it is empty; the bytes read."""
    view = memoryview(bytearray(read_bytes))
    total = 0
    while True:
        try:
            p = work.get_nowait()
        except queue.Empty:
            return total
        if kind == "cat":
            subprocess.run(["cat", str(p)], stdout=subprocess.DEVNULL, check=True)
            total += p.stat().st_size
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            while n := os.readv(fd, [view]):
                total += n
        finally:
            os.close(fd)


def read_files(
    paths: list[Path],
    readers: int,
    read_bytes: int,
    kind: str = "python",
    timeout: float | None = None,
    on_timeout: Callable[[], object] | None = None,
) -> tuple[int, float]:
    """Read every file once with ``readers`` parallel workers; return (bytes, seconds).

    A pass that takes longer than ``timeout`` calls ``on_timeout`` (abort the mount's FUSE connection,
    so blocked readers fail instead of hanging) and raises.

    ``python``: each worker reads whole files with ``readinto`` of a ``read_bytes`` buffer (like a
    DataLoader worker reading a sample). ``cat``: each worker runs ``cat FILE > /dev/null``.
    """
    work: queue.Queue[Path] = queue.Queue()
    for p in paths:
        work.put(p)
    totals = [0] * readers
    errors: list[BaseException] = []

    def worker(idx: int) -> None:
        try:
            totals[idx] = _drain(work, kind, read_bytes)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(readers)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    deadline = None if timeout is None else t0 + timeout
    for t in threads:
        t.join(None if deadline is None else max(0.0, deadline - time.perf_counter()))
    if any(t.is_alive() for t in threads):
        if on_timeout:
            on_timeout()
        for t in threads:
            t.join(30)
        raise harness.HarnessError(f"read pass over {len(paths)} files did not finish within {timeout}s")
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(totals), elapsed


def mbps(nbytes: int, seconds: float) -> float:
    return round(nbytes / MB / seconds, 1) if seconds > 0 else float("inf")


def write_dataset(root: Path, files: int, size: int) -> tuple[int, float]:
    root.mkdir(parents=True, exist_ok=True)
    total, elapsed = 0, 0.0
    for i in range(files):
        data = os.urandom(size)  # generated outside the timed region
        t0 = time.perf_counter()
        with open(root / f"sample-{i:05d}.bin", "wb", buffering=0) as f:
            view = memoryview(data)
            for off in range(0, size, 4 * MIB):
                f.write(view[off : off + 4 * MIB])
        elapsed += time.perf_counter() - t0  # close() returns after the blocks are uploaded
        total += size
    return total, elapsed


def _fill_cache(m: harness.MountHandle, read: Callable[[], object], dataset_bytes: int) -> dict:
    """Wait until the local cache holds the dataset (reading again, untimed, when the client dropped blocks)."""
    t0 = time.perf_counter()
    cached, refills = m.wait_cached(dataset_bytes, timeout=60), 0
    while cached < dataset_bytes and refills < 3:
        # The client drops blocks it cannot queue for the cache disk fast enough (juicefs_blockcache_drops,
        # seen with 4 cold readers); read again, untimed, to fill the cache before the warm pass.
        read()
        cached, refills = m.wait_cached(dataset_bytes, timeout=60), refills + 1
    if cached < dataset_bytes:
        raise harness.HarnessError(f"the cache holds {cached} of {dataset_bytes} bytes after {refills} refills")
    return {
        "cached_bytes": cached,
        "waited_seconds": round(time.perf_counter() - t0, 2),
        "dropped_blocks": int(m.metric("juicefs_blockcache_drops")),
        "refill_passes": refills,
    }


def _passes(
    m: harness.MountHandle, read: Callable[[list[Path]], tuple[int, float]], paths: list[Path], size: int
) -> dict:
    """The cold pass (from S3), the cache fill, the warm pass (from the cache only), the hot pass (page cache)
    and the limit (the cache's block files read directly)."""
    out: dict = {}
    harness.drop_page_cache()
    get0 = m.object_get_bytes()
    n, s = read(paths)
    out["cold"] = {
        "bytes": n,
        "seconds": round(s, 3),
        "MBps": mbps(n, s),
        "s3_get_bytes": int(m.object_get_bytes() - get0),
    }
    out["cache_fill"] = _fill_cache(m, lambda: read(paths), size)
    harness.drop_page_cache()
    get1, hit1 = m.object_get_bytes(), m.metric("juicefs_blockcache_hit_bytes")
    n, s = read(paths)
    out["warm"] = {
        "bytes": n,
        "seconds": round(s, 3),
        "MBps": mbps(n, s),
        "s3_get_bytes": int(m.object_get_bytes() - get1),
        "cache_hit_bytes": int(m.metric("juicefs_blockcache_hit_bytes") - hit1),
    }
    if out["warm"]["s3_get_bytes"]:
        raise harness.HarnessError(f"the warm pass fetched {out['warm']['s3_get_bytes']} bytes from S3")
    n, s = read(paths)
    out["hot"] = {"bytes": n, "seconds": round(s, 3), "MBps": mbps(n, s)}
    return out


def one_cycle(
    stack: harness.Stack,
    options: list[str],
    files: list[str],
    dataset_bytes: int,
    readers: int,
    read_bytes: int,
    kind: str,
    cycle: int,
    log: Callable[[str], object],
    post_start: list[str],
) -> dict:
    name = f"read-r{readers}-c{cycle}"
    cache_root = stack.workdir / f"{name}-cache"
    shutil.rmtree(cache_root, ignore_errors=True)
    with stack.mount(options, name=name, cache_root=cache_root) as m:
        if post_start:  # what the platform's mount pod runs once mounted (the FUSE read-ahead)
            m.run_post_start(post_start)
        paths = [m.mountpoint / "dataset" / f for f in files]
        assert m.cached_bytes() == 0, "the cold pass must start from an empty cache"

        def guarded(paths: list[Path]) -> tuple[int, float]:
            abort = lambda: harness.abort_fuse_connection(m.mountpoint)  # noqa: E731
            return read_files(paths, readers, read_bytes, kind, timeout=PASS_TIMEOUT, on_timeout=abort)

        out = _passes(m, guarded, paths, dataset_bytes)
        blocks = m.cache_block_files()
        harness.drop_page_cache()
        n, s = read_files(blocks, readers, read_bytes, kind)
        out["limit"] = {"bytes": n, "files": len(blocks), "seconds": round(s, 3), "MBps": mbps(n, s)}
    log(
        f"  readers={readers} cycle={cycle} load={os.getloadavg()[0]:.1f}: "
        + "  ".join(f"{k} {out[k]['MBps']:.0f}" for k in PASSES)
        + " MB/s"
    )
    return out


def median_pass(cycles: list[dict], key: str) -> float:
    return round(statistics.median(c[key]["MBps"] for c in cycles), 1)


def summarize(cycles: list[dict]) -> dict:
    """The median of each pass over the cycles, and of the warm/cold and warm/limit ratios taken per cycle
    (passes seconds apart, so host noise mostly cancels); each cycle gets its ratios too."""
    summary: dict = {k: median_pass(cycles, k) for k in PASSES}
    for c in cycles:
        c["warm_over_cold"] = round(c["warm"]["MBps"] / c["cold"]["MBps"], 2)
        c["warm_over_limit"] = round(c["warm"]["MBps"] / c["limit"]["MBps"], 2)
    summary["warm_over_cold"] = round(statistics.median(c["warm_over_cold"] for c in cycles), 2)
    summary["warm_over_limit"] = round(statistics.median(c["warm_over_limit"] for c in cycles), 2)
    return summary
