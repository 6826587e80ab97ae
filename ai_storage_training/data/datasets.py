"""ShardDataset: a packed dataset version (manifest.py) as a PyTorch IterableDataset, resumable mid-epoch.

- Split: every epoch, the shards are put in an order seeded by ``(seed, epoch)`` (the same on every rank); rank
  ``r`` of ``w`` takes every ``w``-th shard from ``r``, and DataLoader worker ``k`` of ``n`` every ``n``-th of
  those from ``k``: each shard is read by exactly one worker of one rank per epoch.
- Even shares (``even=True``, the default): every worker of every rank yields the same number of samples per
  epoch, the fewest any of them holds (the others skip the rest of theirs that epoch), so every rank gets as many
  batches as the others: a DDP rank that runs out first would leave the others waiting in their all-reduce.
  ``even=False`` yields every sample, in the shares the shards give.
- Shuffle: each worker's samples pass through a bounded buffer (``shuffle_buffer`` samples) from which a
  generator seeded by ``(seed, epoch, rank, worker)`` draws; the order of sample *positions* is computed from the
  manifest's sample counts alone, so it is known before any byte is read.
- Read-ahead: ``readahead`` whole shards are read by a background thread while the job works; each is checked
  against the manifest (size, CRC32C, then its sample count) before any of its samples is used, and only the
  samples still to come are kept in memory.
- Resume: ``state_dict()`` is ``{"epoch", "yielded"}`` of this worker (torchdata's StatefulDataLoader calls it in
  each worker and hands it back after a restart); ``load_state_dict()`` recomputes the order and skips the
  positions already yielded, without reading the shards they came from (same ranks and workers only).
- Resume anywhere: ``resume(epoch, segments)`` (``position.DataPosition`` calls it) continues an epoch on any
  number of ranks and workers. Each segment is one layout's run within the epoch (its ranks, workers and how many
  samples each worker handed to training). On the layout that saved, every worker goes on in its own order (the
  same samples in the same order as a run that never stopped); on another, the samples the segments trained are
  recomputed from the orders alone and the rest, in the epoch's shard order, is cut into equal runs, one per worker
  of the new layout (shuffled within it): across resumes every sample of the epoch is trained once (``even=True``:
  a remainder of fewer samples than workers is left out of that epoch, so every rank gets as many batches).
- Metrics: each shard read counts as a read of the training metrics (hit: it was read ahead in time; miss: the
  job waited; the wait is the loader's storage time), ``transform``'s time as its transform time (``steps.py``);
  in DataLoader workers they reach the scrape with ``PROMETHEUS_MULTIPROC_DIR`` (metrics.py).

Needs the ``torch`` extra (torch, webdataset); ``import ai_storage_training`` itself does not import this module.
"""

from __future__ import annotations

import io
import os
import random
import tarfile
import time
from array import array
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info
from webdataset.tariterators import group_by_keys, tar_file_iterator

from .. import metrics, steps
from . import manifest as mf

Sample = dict[str, Any]
Segment = dict[str, Any]
"""One layout's run within an epoch: ``{"world", "workers", "yielded": [[samples per worker] per rank]}``."""


def positions(counts: list[int], shard_ids: list[int], buffer: int, rng: random.Random) -> array:
    """The order in which a worker yields its samples, each as ``shard_id << 32 | index``: the samples of
    ``shard_ids`` in that order pass through a buffer of ``buffer`` slots from which ``rng`` draws."""
    out, pool = array("q"), array("q")
    for sid in shard_ids:
        for index in range(counts[sid]):
            pool.append(sid << 32 | index)
            if len(pool) >= buffer:
                i = rng.randrange(len(pool))
                pool[i], pool[-1] = pool[-1], pool[i]
                out.append(pool.pop())
    while pool:
        i = rng.randrange(len(pool))
        pool[i], pool[-1] = pool[-1], pool[i]
        out.append(pool.pop())
    return out


def load_loader_state(loader: Any, state: dict[str, Any]) -> None:
    """``loader.load_state_dict(state)`` (torchdata's StatefulDataLoader), refused in one line when the state was
    saved with another number of DataLoader workers: each worker's position is its own, and torchdata says only
    ``AssertionError`` then."""
    main = (state.get("_snapshot") or {}).get("_main_snapshot") or {}  # a multiprocess loader's state (torchdata)
    saved, current = int(main.get("_num_workers", 0)), int(getattr(loader, "num_workers", 0))
    if saved != current:
        raise ValueError(
            f"num_workers: the saved DataLoader position is of {saved} worker(s), this loader has {current}; "
            f"resume with num_workers={saved} (each worker's position is its own), or start the epoch again"
        )
    loader.load_state_dict(state)


def where_in_the_job() -> tuple[int, int]:
    """This process's rank and the world size: torch.distributed's when it is initialized, else torchrun's
    ``RANK`` and ``WORLD_SIZE``, else 0 of 1. Called where the dataset is made (the main process): in a DataLoader
    worker started by forkserver or spawn, torch.distributed is not initialized and every worker would think it is
    rank 0 of 1, each rank then reading the whole dataset."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    world = os.environ.get("WORLD_SIZE", "1")
    rank = os.environ.get("RANK")
    if not world.isdigit() or int(world) < 1:
        raise ValueError(f"WORLD_SIZE: expected a positive integer; got {world!r}")
    if int(world) > 1 and (rank is None or not rank.isdigit()):
        raise ValueError(
            f"rank: WORLD_SIZE says {world} ranks but this process has no rank (RANK is {rank!r} and torch.distributed "
            "is not initialized); make the dataset after init_process_group, or pass rank= and world_size="
        )
    return (int(rank) if rank is not None and rank.isdigit() else 0), int(world)


class ShardDataset(IterableDataset):
    """The samples (WebDataset dicts: ``__key__``, ``__url__`` and one ``bytes`` entry per extension, passed
    through ``transform`` when given) of the dataset version in ``directory`` (default
    ``$AI_STORAGE_DATASET_DIR``), refused unless its manifest is ``version`` (when given) and hashes to
    ``manifest_sha256`` (default ``$AI_STORAGE_DATASET_MANIFEST_SHA256``)."""

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        version: str | None = None,
        manifest_sha256: str | None = None,
        seed: int = 0,
        shuffle_buffer: int = 1000,
        readahead: int = 2,
        rank: int | None = None,
        world_size: int | None = None,
        even: bool = True,
        transform: Callable[[Sample], Any] | None = None,
    ):
        directory = directory if directory is not None else os.environ.get(mf.DIR_VARIABLE, "")
        if not directory:
            raise ValueError(f"directory: expected a dataset version directory; got none (nor ${mf.DIR_VARIABLE})")
        for name, value, low in (("shuffle_buffer", shuffle_buffer, 1), ("readahead", readahead, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}: expected an integer >= {low}; got {value!r}")
        self.directory = Path(directory)
        self.manifest = mf.load(self.directory, version=version, sha256=manifest_sha256)
        self.seed, self.shuffle_buffer, self.readahead, self.transform = seed, shuffle_buffer, readahead, transform
        self._transform = steps.timed(transform) if transform else None  # its time: the loader's transform share
        if (rank is None) != (world_size is None):
            raise ValueError("rank, world_size: give both or neither (neither: torch.distributed's, or torchrun's)")
        if rank is None or world_size is None:
            rank, world_size = where_in_the_job()
        if not 0 <= rank < world_size:
            raise ValueError(f"rank: expected 0 <= rank < world_size ({world_size}); got {rank}")
        if not isinstance(even, bool):
            raise ValueError(f"even: expected True (equal shares per rank and worker) or False; got {even!r}")
        self.rank, self.world_size, self.even = rank, world_size, even  # fixed here: workers never look them up
        self.epoch = 0
        self._yielded = 0
        self._resume: dict[str, int] | None = None
        self._segments: tuple[int, list[Segment]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration follows (call before each epoch, as with
        DistributedSampler)."""
        self.epoch = epoch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "yielded": self._yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume = {"epoch": int(state["epoch"]), "yielded": int(state["yielded"])}

    def resume(self, epoch: int, segments: list[Segment]) -> None:
        """Continue ``epoch`` after the samples ``segments`` trained (each: ``{"world", "workers", "yielded"}``,
        ``yielded[rank][worker]`` samples handed to training), on this dataset's ranks and any worker count."""
        for i, seg in enumerate(segments):
            world, workers, yielded = seg["world"], seg["workers"], seg["yielded"]
            if len(yielded) != world or any(len(counts) != workers for counts in yielded):
                raise ValueError(f"segments[{i}]: expected {world} ranks x {workers} workers of counts; got {yielded}")
        self._segments = (int(epoch), [dict(seg) for seg in segments])

    def _split(self) -> tuple[int, int, int, int]:
        info = get_worker_info()
        return self.rank, self.world_size, (info.id if info else 0), (info.num_workers if info else 1)

    def _shard_order(self, epoch: int) -> list[int]:
        shard_ids = list(range(len(self.manifest.shards)))
        random.Random(f"{self.seed}:{epoch}").shuffle(shard_ids)
        return shard_ids

    def _base_order(self, epoch: int, rank: int, world: int, worker: int, workers: int) -> tuple[list[int], array]:
        """A worker's shards and sample positions in ``epoch`` for a layout (before the even cut)."""
        mine = self._shard_order(epoch)[rank::world][worker::workers]
        rng = random.Random(f"{self.seed}:{epoch}:{rank}:{worker}")
        return mine, positions([s.samples for s in self.manifest.shards], mine, self.shuffle_buffer, rng)

    def _resumed_orders(
        self, epoch: int, world: int, workers: int, trained: bytearray
    ) -> list[tuple[list[int], array]]:
        """Every worker's shards and positions of a layout resumed in ``epoch``, rank-major: what ``trained`` leaves,
        in the epoch's shard order, cut into equal runs (``even``: the remainder, fewer than one per worker, waits
        for the next epoch; else the first workers take one more), each run shuffled by its worker's generator."""
        first, left = 0, array("q")
        starts = {}
        for sid, shard in enumerate(self.manifest.shards):
            starts[sid], first = first, first + shard.samples
        for sid in self._shard_order(epoch):
            left.extend(sid << 32 | i for i in range(self.manifest.shards[sid].samples) if not trained[starts[sid] + i])
        readers = world * workers
        share, extra = divmod(len(left), readers)
        out, at = [], 0
        for n in range(readers):
            size = share + (0 if self.even or n >= extra else 1)
            run = left[at : at + size]
            at += size
            order = list(run)
            random.Random(f"{self.seed}:{epoch}:{n // workers}:{n % workers}:resumed").shuffle(order)
            out.append((list(dict.fromkeys(p >> 32 for p in run)), array("q", order)))
        return out

    def _resumed(self, epoch: int) -> tuple[list[Segment], int]:
        """The segments of ``epoch`` before this run's own layout, and where this worker continues: on the layout
        that saved last, each worker goes on in its own order from its count (as if it had never stopped); on
        another, every worker starts its run of what all the segments left."""
        if self._segments is None or self._segments[0] != epoch:
            return [], 0
        segments = self._segments[1]
        rank, world, worker, workers = self._split()
        last = segments[-1]
        if (last["world"], last["workers"]) == (world, workers):
            return segments[:-1], int(last["yielded"][rank][worker])
        return segments, 0

    def trained_before(self, epoch: int, segments: list[Segment]) -> bytearray | None:
        """One byte per sample of the version (numbered across the shards in manifest order), set for each that
        ``segments`` of ``epoch`` trained; None: no segment."""
        if not segments:
            return None
        starts, first = [], 0
        for shard in self.manifest.shards:
            starts.append(first)
            first += shard.samples
        trained: bytearray | None = None
        for seg in segments:
            world, workers = seg["world"], seg["workers"]
            if trained is None:
                orders = [self._base_order(epoch, r, world, k, workers) for r in range(world) for k in range(workers)]
            else:
                orders = self._resumed_orders(epoch, world, workers, trained)
            now = bytearray(first) if trained is None else bytearray(trained)
            for n, (_, order) in enumerate(orders):
                for p in order[: seg["yielded"][n // workers][n % workers]]:
                    now[starts[p >> 32] + (p & 0xFFFFFFFF)] = 1
            trained = now
        return trained

    def order(self, epoch: int, segments: list[Segment] | None = None) -> tuple[list[int], array]:
        """This worker's shards (indices into the manifest) and sample positions for ``epoch``: its shards' samples
        (cut to the even share when ``even``), or after a resume in this epoch its run of what is left."""
        rank, world, worker, workers = self._split()
        trained = self.trained_before(epoch, self._resumed(epoch)[0] if segments is None else segments)
        if trained is not None:
            return self._resumed_orders(epoch, world, workers, trained)[rank * workers + worker]
        mine, order = self._base_order(epoch, rank, world, worker, workers)
        counts, shard_ids = [s.samples for s in self.manifest.shards], self._shard_order(epoch)
        held = [sum(counts[s] for s in shard_ids[r::world][k::workers]) for r in range(world) for k in range(workers)]
        if min(held) == 0 and (self.even or len(shard_ids) < world):
            raise mf.DatasetError(
                f"{self.manifest.describe()} has {len(shard_ids)} shards for {world} ranks x {workers} DataLoader "
                f"workers: some would get none; pack it into at least {world * workers if self.even else world} "
                f"shards (a smaller shard size) or use fewer workers"
            )
        return mine, order[: min(held)] if self.even else order

    def _read(self, sid: int) -> list[Sample]:
        """Shard ``sid``'s samples, refused unless its size, CRC32C and sample count match the manifest."""
        shard = self.manifest.shards[sid]
        path = self.directory / shard.name
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise mf.missing(self.manifest, shard, path) from None
        mf.check_shard(self.manifest, shard, len(data), mf.crc32c_hex(data))
        try:
            members = ({**m, "__url__": shard.name} for m in tar_file_iterator(io.BytesIO(data)))
            found = list(group_by_keys(members))
        except (tarfile.TarError, ValueError) as e:
            raise mf.DatasetError(f"shard {shard.name} of {self.manifest.describe()}: unreadable tar ({e})") from None
        if len(found) != shard.samples:
            raise mf.DatasetError(
                f"shard {shard.name} of {self.manifest.describe()}: {len(found)} samples, manifest says {shard.samples}"
            )
        return found

    def __iter__(self) -> Iterator[Any]:
        segments, start = self._resumed(self.epoch)
        self._segments = None  # once: a persistent worker's next pass is a new epoch
        if self._resume is not None:
            self.epoch, start = self._resume["epoch"], self._resume["yielded"]
            self._resume = None
        shard_ids, order = self.order(self.epoch, segments)
        self._yielded = start
        remaining = order[start:]
        wanted: dict[int, set[int]] = {}
        for pos in remaining:
            wanted.setdefault(pos >> 32, set()).add(pos & 0xFFFFFFFF)
        to_read = iter([sid for sid in shard_ids if sid in wanted])
        held: dict[int, Sample] = {}
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-readahead") as pool:
            pending: list[tuple[int, Future[list[Sample]]]] = []

            def top_up() -> None:
                while len(pending) < self.readahead and (sid := next(to_read, None)) is not None:
                    pending.append((sid, pool.submit(self._read, sid)))

            try:
                top_up()
                for pos in remaining:
                    while pos not in held:
                        sid, future = pending.pop(0)
                        asked, ready = time.perf_counter(), future.done()
                        found = future.result()
                        metrics.READ_SECONDS.observe(time.perf_counter() - asked)
                        metrics.READ_BYTES.inc(self.manifest.shards[sid].size)
                        metrics.SHARD_READS.inc()
                        (metrics.PREFETCH_HITS if ready else metrics.PREFETCH_MISSES).inc()
                        held.update((sid << 32 | i, found[i]) for i in wanted[sid])
                        top_up()
                    sample = held.pop(pos)
                    self._yielded += 1
                    yield self._transform(sample) if self._transform else sample
            finally:
                for _, waiting in pending:
                    waiting.cancel()
