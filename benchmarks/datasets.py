#!/usr/bin/env python3
"""Small files against packed shards, cold, warm and after eviction, on the real data path.

The platform's generated config on the real binaries (JuiceFS over moto S3, on loopback and behind the shaped
link of ``shaped_network.py``; helpers of ``datapath.py``). The same ``--samples`` x ``--sample-kib`` samples are
written onto the volume twice: as small files (one per sample) and packed with ``python -m ai_storage_training
pack``'s API into WebDataset shards of ``--shard-mib``. A training-like consumer reads each layout: a DataLoader
with ``--workers`` workers, batches of ``--batch`` samples, and a ``--step-ms`` compute step per batch in the main
process (a GPU step the loader must hide). Small files go through a plain map-style Dataset (one file per
``__getitem__``, shuffled by the sampler), the packed shards through ``ShardDataset``.

Per layout: a mount with an empty cache reads ``cold`` (page cache dropped, bytes from S3) then, once the cache
holds the dataset, ``warm`` (page cache dropped, no S3 GET allowed); a second mount with a cache of half the
dataset (``cache-size``) reads once to fill it (evicting), then ``evicted`` (page cache dropped: part of the
dataset from the cache, the rest from S3). Also timed: writing each layout onto the volume (packing throughput).
Mosaic Streaming (MDS) is not measured: it would pull a second torch (see docs/training.md). Results go to
benchmarks/results/datasets.json with the command line. Needs root (drop_caches, the namespace) and /dev/fuse.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "datapath"), str(REPO / "benchmarks")]

import datapath  # noqa: E402
import harness  # noqa: E402
from conftest import generated_config  # noqa: E402  (the swap point)
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from ai_storage_training.data.datasets import ShardDataset  # noqa: E402
from ai_storage_training.data.pack import pack  # noqa: E402

MIB = 1024 * 1024


class Files(Dataset):
    """The plain baseline: one small file per sample, read whole in ``__getitem__``."""

    def __init__(self, paths: list[Path]):
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> int:
        return len(self.paths[index].read_bytes())


def sample_bytes(sample: dict) -> int:
    return len(sample["bin"])


def total(batch: list[int]) -> int:
    return sum(batch)


def consume(layout: str, root: Path, args: argparse.Namespace) -> dict:
    """One epoch through a DataLoader with a compute step per batch: samples, bytes, seconds, MB/s."""
    if layout == "small":
        dataset: Dataset = Files(sorted((root / "small").iterdir()))
        loader = DataLoader(dataset, batch_size=args.batch, shuffle=True, num_workers=args.workers, collate_fn=total)
    else:
        shards = ShardDataset(  # one rank: every sample, as the file-per-sample dataset reads them
            root / "packed" / "bench" / "v1", shuffle_buffer=256, even=False, transform=sample_bytes
        )
        loader = DataLoader(shards, batch_size=args.batch, num_workers=args.workers, collate_fn=total)
    nbytes, batches = 0, 0
    t0 = time.perf_counter()
    for batch in loader:
        nbytes += batch
        batches += 1
        time.sleep(args.step_ms / 1000)
    seconds = time.perf_counter() - t0
    return {"bytes": nbytes, "batches": batches, "seconds": round(seconds, 3), "MBps": datapath.mbps(nbytes, seconds)}


def timed(m: harness.MountHandle, layout: str, args: argparse.Namespace) -> dict:
    harness.drop_page_cache()
    get0 = m.object_get_bytes()
    out = consume(layout, m.mountpoint, args)
    out["s3_get_bytes"] = int(m.object_get_bytes() - get0)
    out["workers_max_rss_mib"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    return out


def passes(stack: harness.Stack, options: list[str], post_start: list[str], layout: str, size: int, args) -> dict:
    out: dict = {}
    with stack.mount(options, name=f"{layout}-fresh") as m:
        if post_start:
            m.run_post_start(post_start)
        assert m.cached_bytes() == 0, "the cold pass must start from an empty cache"
        out["cold"] = timed(m, layout, args)
        refills = 0
        while m.wait_cached(size, timeout=60) < size and refills < 3:  # blocks the client could not queue
            consume(layout, m.mountpoint, args)
            refills += 1
        out["warm"] = timed(m, layout, args)
        out["warm"]["refill_passes"] = refills
        if out["warm"]["s3_get_bytes"]:
            raise harness.HarnessError(f"{layout}: the warm pass fetched {out['warm']['s3_get_bytes']} bytes from S3")
    half = datapath.apply_overrides(options, [f"cache-size={max(1, size // 2 // MIB)}"], [])
    with stack.mount(half, name=f"{layout}-small-cache") as m:
        if post_start:
            m.run_post_start(post_start)
        consume(layout, m.mountpoint, args)  # fills the half-size cache, evicting as it goes
        time.sleep(2)
        out["evicted"] = timed(m, layout, args)
        out["evicted"]["cached_bytes_after"] = m.cached_bytes()
        out["evicted"]["evicted_blocks"] = int(m.metric("juicefs_blockcache_evicts"))
    for phase in ("cold", "warm", "evicted"):
        print(f"  {layout:6} {phase:8} {out[phase]['MBps']:8.1f} MB/s  ({out[phase]['seconds']} s)", flush=True)
    return out


def write_layouts(stack: harness.Stack, local: Path, args: argparse.Namespace) -> dict:
    """Both layouts onto the volume from the same local files; seconds and MB/s of each."""
    out = {}
    with stack.mount([], name="writer") as w:
        t0 = time.perf_counter()
        shutil.copytree(local, w.mountpoint / "small")
        out["small"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = pack(local, w.mountpoint / "packed", "bench", "v1", shard_bytes=int(args.shard_mib * MIB))
        out["packed"] = time.perf_counter() - t0
    shutil.rmtree(stack.workdir / "writer-cache", ignore_errors=True)  # the data now lives only in S3
    size = args.samples * args.sample_kib * 1024
    return {
        "shards": len(result.shards),
        **{k: {"seconds": round(s, 3), "MBps": datapath.mbps(size, s)} for k, s in out.items()},
    }


def run(args: argparse.Namespace, mode: str) -> dict:
    net, object_store = datapath.network(args, mode)
    print(f"network: {net}", flush=True)
    cfg = generated_config()
    options, post_start = cfg["mount_options"], cfg["mount_pod_post_start"]
    workdir = Path(tempfile.mkdtemp(prefix="datasets-bench-", dir=args.workdir))
    local = workdir / "local-files"
    local.mkdir()
    for i in range(args.samples):
        (local / f"sample{i:06d}.bin").write_bytes(os.urandom(args.sample_kib * 1024))
    size = args.samples * args.sample_kib * 1024
    load_before = os.getloadavg()[0]
    with harness.datapath_stack(cfg["redis_conf"], cfg["volume_secret"], workdir, object_store=object_store) as stack:
        write = write_layouts(stack, local, args)
        shutil.rmtree(local)
        print(f"  write: small {write['small']['MBps']} MB/s, packed {write['packed']['MBps']} MB/s", flush=True)
        read = {layout: passes(stack, options, post_start, layout, size, args) for layout in ("small", "packed")}
    shutil.rmtree(workdir, ignore_errors=True)
    ratios = {
        f"packed_over_small_{phase}": round(read["packed"][phase]["MBps"] / read["small"][phase]["MBps"], 2)
        for phase in ("cold", "warm", "evicted")
    }
    print(f"  ratios: {ratios}", flush=True)
    return {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python benchmarks/datasets.py " + " ".join(sys.argv[1:]),
        "network": net,
        "config": {k: v for k, v in vars(args).items() if k not in ("out", "workdir", "modes")},
        "juicefs": harness.run_juicefs(["version"]).stdout.strip(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "write": write,
        "read": read,
        "ratios": ratios,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1500, help="samples (default 1500)")
    ap.add_argument("--sample-kib", type=int, default=64, help="bytes of each sample in KiB (default 64)")
    ap.add_argument("--shard-mib", type=float, default=8, help="packed shard size in MiB (default 8)")
    ap.add_argument("--workers", type=int, default=2, help="DataLoader workers (default 2)")
    ap.add_argument("--batch", type=int, default=32, help="samples per batch (default 32)")
    ap.add_argument("--step-ms", type=float, default=5, help="compute step per batch in ms (default 5)")
    datapath.add_link_arguments(ap)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "datasets.json")
    args = ap.parse_args(argv)
    for mode in args.modes:
        datapath.save(args.out, mode, run(args, mode), unit="one pass each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
