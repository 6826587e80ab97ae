#!/usr/bin/env python3
"""Checkpoint benchmark on the data path: what an asynchronous, validated, sharded checkpoint costs the job.

Runs on the real JuiceFS mount (real Redis, the S3 endpoint, the platform's generated mount options), set up by
``benchmarks/datapath.py``'s helpers, in two network modes: ``loopback`` and ``shaped`` (the S3 endpoint behind a
rate-limited link with added latency, ``shaped_network.py``). Per mode, with a state of --state-mib in 4 tensors:

1. blocked: the time ``AsyncCheckpointer.save_dcp`` (``dcp.async_save`` through the manager's writer) blocks the
   job, over a ``clone()`` of the same tensors in memory (target <= 1.5); the same for the buffer API
   (``AsyncCheckpointer.save``) over ``bytes`` copies of the buffers.
2. background: the background part of that DCP save (write, CRC32C, fsync, manifests, commit, until the future is
   done) over a plain write + fsync of the same bytes (the step's files) to the same mount (target <= 1.1).
3. ranks: 4 processes writing a quarter of the state each through the multi-rank CheckpointManager (one
   commit), each on a JuiceFS mount of its own (a client per rank, as ranks on their own nodes have), over one
   process writing all of it through one mount (target >= 2.5 faster). The clients share this machine's cores
   and its one link to the S3 endpoint; ``MBps_endpoint`` is that endpoint's own ceiling (the same bytes PUT
   straight to it as 4 MiB objects, as many at a time as the 4 clients may upload); ``cpu_busy_*`` the share of all
   of the machine's cores busy while the timed saves ran.
4. restore: a validated load (``manager.load()``: every byte's CRC32C, then the job reads the files) over a plain
   read of the same files, page cache dropped before each (target <= 1.2).

Each figure is the median of --repeat runs; each ratio comes from medians of the same run. Results go to
benchmarks/results/checkpoints.json with the command line. Needs root (drop_caches, the namespace) and /dev/fuse.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests" / "datapath"), str(REPO / "benchmarks")]

import datapath  # noqa: E402  (network modes, the generated options)
import harness  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from conftest import generated_config  # noqa: E402

from ai_storage_training.checkpoint.async_save import AsyncCheckpointer  # noqa: E402
from ai_storage_training.checkpoint.dcp import ManagedWriter  # noqa: E402
from ai_storage_training.checkpoint.manager import CheckpointManager  # noqa: E402

MIB = 1024 * 1024
TENSORS = 4
RANKS = 4
UPLOADS = 20
"""The generated ``max-uploads``: a client's concurrent PUTs."""
TARGETS = {"blocked_dcp": 1.5, "blocked_buffers": 1.5, "background": 1.1, "ranks": 2.5, "restore": 1.2}
"""Upper bounds of the ratios, except ``ranks``: a lower bound of the speed-up."""


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def timed(function, *args) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


def plain_write(directory: Path, files: dict[str, bytes]) -> None:
    """Write and fsync each file, then the directory: the floor a checkpoint write is measured against."""
    directory.mkdir(parents=True)
    for name, data in files.items():
        with open(directory / name, "wb", buffering=0) as f:
            view = memoryview(data)
            for offset in range(0, len(view), 4 * MIB):
                f.write(view[offset : offset + 4 * MIB])
            os.fsync(f.fileno())
    fd = os.open(directory, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def read_all(paths: list[Path]) -> int:
    buffer = bytearray(4 * MIB)
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buffer):
                total += n
    return total


@contextlib.contextmanager
def timing(cls: type, name: str, samples: list[float]) -> Iterator[None]:
    """Append the duration of every call of ``cls.name`` (in any thread) to ``samples`` while the block runs."""
    original = getattr(cls, name)

    def timed_method(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            samples.append(time.perf_counter() - started)

    setattr(cls, name, timed_method)
    try:
        yield
    finally:
        setattr(cls, name, original)


def blocked_and_background(root: Path, tensors: dict[str, torch.Tensor], repeat: int) -> dict:
    """1 and 2: async DCP saves (blocked, background) against clone() and a plain write of the step's files; the
    background part split into the writer's write_data (DCP's write, CRC32C, fsyncs, manifest) and its finish
    (DCP's .metadata, the commit, retention)."""
    manager = CheckpointManager(root / "dcp", keep=2)
    blocked, background, copies, plain, writes, finishes = [], [], [], [], [], []
    with (
        AsyncCheckpointer(manager) as checkpointer,
        timing(ManagedWriter, "write_data", writes),
        timing(ManagedWriter, "finish", finishes),
    ):
        checkpointer.save_dcp(0, {"model": tensors}).result()  # warm-up: DCP's first call sets up its machinery
        for step in range(1, repeat + 1):
            copies.append(timed(lambda: {k: v.clone() for k, v in tensors.items()}))
            started = time.perf_counter()
            future = checkpointer.save_dcp(step, {"model": tensors})
            returned = time.perf_counter()
            future.result()
            blocked.append(returned - started)
            background.append(time.perf_counter() - returned)
            step_dir = manager.final_path(step)
            files = {p.name: p.read_bytes() for p in step_dir.iterdir() if p.name != "COMPLETE"}
            plain.append(timed(plain_write, root / f"plain-{step}", files))
    buffers = {k: v.numpy() for k, v in tensors.items()}
    buffer_blocked, buffer_copies = [], []
    buffer_manager = CheckpointManager(root / "buffers", keep=2)
    with AsyncCheckpointer(buffer_manager) as checkpointer:
        checkpointer.save(0, {f"{k}.bin": v for k, v in buffers.items()}).result()  # warm-up
        for step in range(1, repeat + 1):
            buffer_copies.append(timed(lambda: {k: v.tobytes() for k, v in buffers.items()}))
            started = time.perf_counter()
            future = checkpointer.save(step, {f"{k}.bin": v for k, v in buffers.items()})
            buffer_blocked.append(time.perf_counter() - started)
            future.result()
    split = ratio(background, plain, "background DCP write + commit", "plain write + fsync")
    split["write_data_seconds"] = [round(s, 4) for s in writes[1:]]  # [0]: the warm-up save
    split["finish_seconds"] = [round(s, 4) for s in finishes[1:]]
    return {
        "blocked_dcp": ratio(blocked, copies, "async_save blocked", "tensor clone()"),
        "blocked_buffers": ratio(buffer_blocked, buffer_copies, "save blocked", "bytes copy"),
        "background": split,
    }


def ratio(numerator: list[float], denominator: list[float], what: str, against: str) -> dict:
    return {
        "measured": what,
        "against": against,
        "seconds": [round(s, 4) for s in numerator],
        "baseline_seconds": [round(s, 4) for s in denominator],
        "ratio": round(median(numerator) / median(denominator), 3),
    }


def _rank(mountpoint: str, rank: int, world: int, step: int, shard_bytes: int, run_id: str, barrier) -> None:
    """One rank (a forked process): its shard(s) in memory, then the timed save through the multi-rank manager."""
    shards = {f"shard-{r}.bin": np.random.default_rng(r).bytes(shard_bytes) for r in range(rank, RANKS, world)}
    manager = CheckpointManager(Path(mountpoint) / "ranks", keep=None, rank=rank, world_size=world, run_id=run_id)
    barrier.wait()

    def write(directory: Path) -> None:
        for name, data in shards.items():
            (directory / name).write_bytes(data)

    manager.save(step, write)


def cpu_jiffies() -> tuple[int, int]:
    """(busy, total) jiffies of all cores since boot, from /proc/stat (idle and iowait are not busy)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def ranks(mounts: list[Path], shard_bytes: int, repeat: int) -> dict:
    """3: RANKS processes, rank r on ``mounts[r]``, vs one process writing every shard through ``mounts[0]``."""
    context = multiprocessing.get_context("fork")
    samples: dict[int, list[float]] = {1: [], RANKS: []}
    jiffies = {1: [0, 0], RANKS: [0, 0]}  # busy, total: while the timed saves ran
    step = 0
    for _ in range(repeat):
        for world in (1, RANKS):
            step += 1
            barrier = context.Barrier(world + 1)
            run_id = f"bench{step}"
            procs = [
                context.Process(target=_rank, args=(str(mounts[r]), r, world, step, shard_bytes, run_id, barrier))
                for r in range(world)
            ]
            for proc in procs:
                proc.start()
            barrier.wait()
            started, (busy, total) = time.perf_counter(), cpu_jiffies()
            for proc in procs:
                proc.join()
            samples[world].append(time.perf_counter() - started)
            jiffies[world] = [a + b - c for a, b, c in zip(jiffies[world], cpu_jiffies(), (busy, total), strict=True)]
            if any(proc.exitcode for proc in procs):
                raise RuntimeError(f"a rank of step {step} failed: {[proc.exitcode for proc in procs]}")
    result = ratio(samples[1], samples[RANKS], "1 writer", f"{RANKS} ranks")
    result["MBps_one"] = round(RANKS * shard_bytes / 1e6 / median(samples[1]), 1)
    result["MBps_ranks"] = round(RANKS * shard_bytes / 1e6 / median(samples[RANKS]), 1)
    result["cpu_busy_one"], result["cpu_busy_ranks"] = (round(jiffies[w][0] / jiffies[w][1], 2) for w in (1, RANKS))
    return result


def endpoint_ceiling(s3: harness.S3Handle, total_bytes: int, repeat: int, uploads: int) -> float:
    """MB/s of PUTting ``total_bytes`` straight to the S3 endpoint as 4 MiB objects (JuiceFS's block size),
    ``uploads`` at a time: what JuiceFS writers on this machine can reach at most, however many there are."""
    client = s3.client(connections=uploads)
    block = np.random.default_rng(0).bytes(4 * MIB)
    samples = []
    for run in range(repeat):
        keys = [f"ceiling/{run}/{i}" for i in range(total_bytes // len(block))]
        started = time.perf_counter()
        with ThreadPoolExecutor(uploads) as pool:
            list(pool.map(lambda key: client.put_object(Bucket=s3.bucket, Key=key, Body=block), keys))
        samples.append(time.perf_counter() - started)
    return round(len(keys) * len(block) / 1e6 / median(samples), 1)


def validated_load(manager: CheckpointManager, paths: list[Path]) -> None:
    with manager.load() as checkpoint:  # every byte's CRC32C
        assert checkpoint is not None
        read_all(paths)  # what the job then reads


def restore(root: Path, repeat: int) -> dict:
    """4: a validated load and reading the files, against a plain read of the same files; page cache dropped."""
    directory = root / "buffers"
    validated, plain, hot = [], [], []
    for _ in range(repeat):
        manager = CheckpointManager(directory, keep=None)  # a restarted job: nothing trusted yet
        latest = manager.latest()
        assert latest is not None
        paths = sorted(p for p in latest.path.iterdir() if p.name != "COMPLETE")
        harness.drop_page_cache()
        plain.append(timed(read_all, paths))
        hot.append(timed(read_all, paths))  # the same read from the page cache: what a second pass costs
        harness.drop_page_cache()
        validated.append(timed(validated_load, manager, paths))
    result = ratio(validated, plain, "validated load + read", "plain read")
    result["page_cache_read_seconds"] = [round(s, 4) for s in hot]
    return result


def run(args: argparse.Namespace, mode: str) -> dict:
    log = lambda message: print(message, flush=True)  # noqa: E731
    net, object_store = datapath.network(args, mode)
    log(f"network: {net}")
    config = generated_config()
    options = config["mount_options"]
    state_bytes = int(args.state_mib * MIB)
    tensors = {f"layer{i}": torch.rand(state_bytes // TENSORS // 4) for i in range(TENSORS)}
    workdir = Path(tempfile.mkdtemp(prefix="checkpoint-bench-", dir=args.workdir))
    load_before = os.getloadavg()[0]
    try:
        with (
            harness.datapath_stack(
                config["redis_conf"], config["volume_secret"], workdir, object_store=object_store
            ) as stack,
            contextlib.ExitStack() as mounts,
        ):
            first, *others = [mounts.enter_context(stack.mount(options, name=f"rank{r}")) for r in range(RANKS)]
            root = first.mountpoint / "bench"
            result = blocked_and_background(root, tensors, args.repeat)
            log(f"  blocked/copy {result['blocked_dcp']['ratio']}, background/plain {result['background']['ratio']}")
            result["restore"] = restore(root, args.repeat)
            log(f"  validated restore/plain read {result['restore']['ratio']}")
            result["ranks"] = ranks([m.mountpoint for m in (first, *others)], state_bytes // RANKS, args.repeat)
            ceiling = endpoint_ceiling(stack.s3, state_bytes, args.repeat, uploads=RANKS * UPLOADS)
            result["ranks"]["MBps_endpoint"] = ceiling
            log(f"  1 writer/{RANKS} ranks {result['ranks']['ratio']}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for name, figure in result.items():
        bound = TARGETS[name]
        figure["target"] = f">= {bound}" if name == "ranks" else f"<= {bound}"
        figure["met"] = figure["ratio"] >= bound if name == "ranks" else figure["ratio"] <= bound
    return {
        "when": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "network": net,
        "state_mib": args.state_mib,
        "repeat": args.repeat,
        "mount_options": options,
        "loadavg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "results": result,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-mib", type=float, default=128, help="checkpointed state in MiB (default 128)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; medians (default 3)")
    datapath.add_link_arguments(parser)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "checkpoints.json")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    torch.set_num_threads(1)
    runs: dict[str, dict] = {}
    document = {"command": " ".join(["benchmarks/checkpoints.py", *(argv or sys.argv[1:])]), "runs": runs}
    for mode in args.modes:
        runs[mode] = run(args, mode)
        print(json.dumps(runs[mode]["results"], indent=1), flush=True)
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
