#!/usr/bin/env python3
"""Checkpoint staging benchmark: what a save costs the job on the device its state lives on, side by side in one run.

The state is a real model and its AdamW state (fp32 weights and moments, ``--state-mib`` in all) on CUDA when it is
present, else on the CPU. Saves go to ``--dir`` (a local disk or the tier under test). Each figure is the median of
``--repeat`` runs after one warm-up; each ratio comes from medians of this run:

1. blocked: how long each way of saving blocks the job. The limit: one device-to-host copy of the state into
   pinned buffers allocated once (on the CPU: a copy into buffers allocated once). Beside it ``tensor.to("cpu")``,
   ``dcp.async_save`` with one ``FileSystemWriter(cache_staged_state_dict=True)`` reused, with a new writer per
   save, and the library's ``AsyncCheckpointer.save_dcp`` (target: at most 1.5x the limit), its ``overlap`` mode
   (the call, then what the guard makes the next step wait).
2. torn: right after each way of saving returns, the optimizer steps (every tensor changes in place); the committed
   checkpoint is restored and compared with the state at the save (target: 0 tensors differ), for the library's
   stager, ``async_stager=DefaultStager(async staging)`` through ``save_dcp``, and ``overlap`` with the guard.
3. durable: from the request until the step is committed (the library's writer: DCP with ``thread_count`` 1, 4
   and 8, CRC32C, fsyncs, the commit) over ``dd ... conv=fsync`` writing as many bytes to the same directory
   (target: at most 1.3x).
4. restore: the library's validated ``dcp.restore`` (each item checked as it is read) over a plain ``dcp.load``
   with ``FileSystemReader`` of the same checkpoint, page cache dropped before each (target: at most 1.15x;
   without root or with ``--keep-page-cache`` the cache stays warm and the result says so), and the same pair
   read again from the page cache. The garbage of the previous load is collected before each (outside the time):
   left, Python's collector freed a whole state inside whichever load came next (0.28 s or 0.44 s for the same
   512 MiB load).

Results: ``--out`` (default benchmarks/results/checkpoint_staging-<device>.json) with the device, torch version
and the command line.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter  # noqa: E402
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict  # noqa: E402

from ai_storage_training.checkpoint import dcp as managed  # noqa: E402
from ai_storage_training.checkpoint.async_save import AsyncCheckpointer  # noqa: E402
from ai_storage_training.checkpoint.dcp import ManagedWriter  # noqa: E402
from ai_storage_training.checkpoint.dcp_reader import restore as managed_restore  # noqa: E402
from ai_storage_training.checkpoint.lag import CheckpointLag  # noqa: E402
from ai_storage_training.checkpoint.manager import CheckpointManager  # noqa: E402

MIB = 1024 * 1024
TARGETS = {"blocked": 1.5, "durable": 1.3, "restore": 1.15}
THREADS = (1, 4, 8)


def median(samples: list[float]) -> float:
    return round(statistics.median(samples), 4)


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Job:
    """A model of ``layers`` square Linear layers and its AdamW, stepped once (so every moment exists). From 1 GiB
    of state the layers are 4096 wide (64 MiB tensors, as in large models), below 512 wide (1 MiB tensors)."""

    def __init__(self, state_mib: int, device: torch.device):
        width = 4096 if state_mib >= 1024 else 512
        per_layer = width * (width + 1) * 4 * 3  # weight and bias, fp32, and two AdamW moments each
        layers = max(2, state_mib * MIB // per_layer)
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).to(device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.device = device
        self.step()
        self.bytes = sum(t.numel() * t.element_size() for t in self.tensors())

    def step(self) -> None:
        """One training step: every parameter and moment changes in place."""
        self.model(torch.randn(8, self.model[0].in_features, device=self.device)).square().mean().backward()
        self.optimizer.step()
        self.optimizer.zero_grad()

    def state(self) -> dict:
        model_state, optim_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optim": optim_state}

    def tensors(self) -> list[torch.Tensor]:
        state = self.state()
        found = list(state["model"].values())
        for values in state["optim"]["state"].values():
            found += [v for v in values.values() if isinstance(v, torch.Tensor) and v.numel() > 1]
        return found

    def snapshot(self) -> list[torch.Tensor]:
        return [t.detach().to("cpu", copy=True) for t in self.tensors()]


def blocked(job: Job, root: Path, repeat: int) -> dict:
    """1: the time each way of saving blocks the job, against the pinned device-to-host limit."""
    tensors = job.tensors()
    cuda = job.device.type == "cuda"
    buffers = [torch.empty(t.shape, dtype=t.dtype, pin_memory=cuda) for t in tensors]

    def limit() -> None:
        for buffer, tensor in zip(buffers, tensors, strict=True):
            buffer.copy_(tensor, non_blocking=cuda)
        synchronize()

    figures: dict[str, list[float]] = {name: [] for name in ("limit", "to_cpu")}
    for _ in range(repeat + 1):
        synchronize()
        figures["limit"].append(timed(limit))
        figures["to_cpu"].append(timed(lambda: [t.to("cpu") for t in tensors]))
    cached = FileSystemWriter(root / "cached", cache_staged_state_dict=cuda)  # the cache pins: CUDA only
    figures["dcp_cached_writer"] = saves(
        repeat, lambda i: dcp.async_save(job.state(), storage_writer=reset(cached, root / f"cached-{i}"))
    )
    figures["dcp_new_writer"] = saves(
        repeat, lambda i: dcp.async_save(job.state(), storage_writer=FileSystemWriter(root / f"new-{i}"))
    )
    manager = CheckpointManager(root / "library", keep=1)
    with AsyncCheckpointer(manager, lag=CheckpointLag()) as checkpointer:
        first = timed(lambda: checkpointer.save_dcp(0, job.state()))  # allocates (and pins) the buffers
        figures["library_save_dcp"] = saves(repeat, lambda i: checkpointer.save_dcp(i + 1, job.state()))
    result = {name: median(samples[1:]) for name, samples in figures.items()} | {"library_first_save": round(first, 4)}
    result |= overlapped(job, root, repeat)
    result["ratio_library"] = round(result["library_save_dcp"] / result["limit"], 2)
    result["target"] = TARGETS["blocked"]
    result["met"] = result["ratio_library"] <= TARGETS["blocked"]
    return result


def overlapped(job: Job, root: Path, repeat: int) -> dict:
    """``overlap``: how long save_dcp's call blocks, then what the guard makes the next step wait for the copy."""
    calls, waits = [], []
    try:
        checkpointer = AsyncCheckpointer(CheckpointManager(root / "overlap", keep=1), lag=CheckpointLag(), overlap=True)
    except ValueError as error:  # a torch whose DefaultStager cannot stage this state
        return {"overlap_error": str(error)[:300]}
    with checkpointer:
        checkpointer.protect(job.optimizer, job.model)
        for i in range(repeat + 1):
            calls.append(timed(lambda i=i: checkpointer.save_dcp(i, job.state())))
            waits.append(timed(checkpointer.wait_staged))  # what the guard makes the next step wait
            checkpointer.wait()
    return {"overlap_call": median(calls[1:]), "overlap_guard_wait": median(waits[1:])}


def reset(writer: FileSystemWriter, path: Path) -> FileSystemWriter:
    writer.reset(path)
    return writer


def saves(repeat: int, save: Callable[[int], object]) -> list[float]:
    """The time each of ``repeat`` + 1 saves blocks (each waited for before the next)."""
    samples = []
    for i in range(repeat + 1):
        synchronize()
        started = time.perf_counter()
        future = save(i)
        samples.append(time.perf_counter() - started)
        upload = getattr(future, "upload_completion", future)
        upload.result()  # type: ignore[union-attr]
    return samples


def timed(function: Callable[[], object]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def torn(job: Job, root: Path) -> dict:
    """2: the optimizer steps right after the save returns; how many tensors of the checkpoint differ from the
    state at the save."""
    cuda = job.device.type == "cuda"
    ways: dict[str, tuple[dict, bool]] = {  # AsyncCheckpointer options, whether save_dcp gets a DefaultStager
        "library": ({}, False),
        "library_with_DefaultStager_async": ({}, True),
        "overlap_with_guard": ({"overlap": True}, False),
    }
    result = {}
    for name, (options, own_stager) in ways.items():
        manager = CheckpointManager(root / f"torn-{name}", keep=1)
        before = job.snapshot()
        try:
            with AsyncCheckpointer(manager, lag=CheckpointLag(), **options) as checkpointer:
                if options.get("overlap"):
                    checkpointer.protect(job.optimizer, job.model)
                stager = DefaultStager(StagingOptions(cuda, False, True, cuda)) if own_stager else None
                checkpointer.save_dcp(1, job.state(), **({"async_stager": stager} if stager else {}))
                job.step()  # every tensor changes at once
            if stager is not None:
                stager.close()
            after = job.snapshot()
            assert managed_restore(manager, job.state()) is not None
            restored = job.snapshot()
            differing = sum(not torch.equal(a, b) for a, b in zip(before, restored, strict=True))
            result[name] = {"differing": differing, "tensors": len(before), "met": differing == 0}
            for tensor, value in zip(job.tensors(), after, strict=True):  # training goes on from the new state
                tensor.copy_(value)
        except Exception as error:  # a stager this torch cannot run: recorded, the others still measured
            result[name] = {"error": f"{type(error).__name__}: {error}"[:300], "met": False}
    return result


def durable(job: Job, root: Path, repeat: int) -> dict:
    """3: request to commit, per DCP writer thread count, against dd writing the same bytes with fsync."""
    result: dict = {}
    count = max(1, job.bytes // (16 * MIB))
    dd = []
    for i in range(repeat + 1):
        target = root / f"dd-{i}"
        dd.append(
            timed(
                lambda target=target: subprocess.run(
                    ["dd", "if=/dev/zero", f"of={target}", "bs=16M", f"count={count}", "conv=fsync"],
                    check=True,
                    capture_output=True,
                )
            )
        )
        target.unlink()
    result["dd_s"] = median(dd[1:])
    default = managed.WRITER_THREADS
    for threads in THREADS:
        managed.WRITER_THREADS = threads  # the writer's default thread_count
        times = []
        manager = CheckpointManager(root / f"durable-{threads}", keep=1)
        with AsyncCheckpointer(manager, lag=CheckpointLag()) as checkpointer:
            for i in range(repeat + 1):
                synchronize()
                times.append(timed(lambda i=i: checkpointer.save_dcp(i, job.state()).result()))
        result[f"threads_{threads}_s"] = median(times[1:])
        result[f"threads_{threads}_ratio"] = round(result[f"threads_{threads}_s"] / result["dd_s"], 2)
        shutil.rmtree(root / f"durable-{threads}")
    managed.WRITER_THREADS = default
    result |= {"default_threads": default, "target": TARGETS["durable"]}
    result["met"] = result[f"threads_{default}_ratio"] <= TARGETS["durable"]
    return result


def drop_caches() -> bool:
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def restore(job: Job, root: Path, repeat: int, cold: bool = True) -> dict:
    """4: validated restore over a plain DCP load of the same checkpoint, cold page cache before each (the
    target), and the same pair from the page cache (what the check and the copies cost the CPU)."""
    manager = CheckpointManager(root / "restore", keep=1)
    dcp.save(job.state(), storage_writer=ManagedWriter(manager, 1))
    path = manager.final_path(1)

    def plain() -> float:
        return timed(lambda: (dcp.load(job.state(), storage_reader=FileSystemReader(path)), synchronize()))

    def validated() -> float:
        return timed(lambda: (managed_restore(manager, job.state()), synchronize()))

    times: dict[str, list[float]] = {"plain_s": [], "validated_s": [], "plain_warm_s": [], "validated_warm_s": []}
    dropped = True
    for _ in range(repeat + 1):
        for name, load in (("plain", plain), ("validated", validated)):
            dropped &= cold and drop_caches()
            synchronize()
            gc.collect()  # the previous load's state is garbage: freed here, not inside the next load's time
            times[f"{name}_s"].append(load())
            gc.collect()
            times[f"{name}_warm_s"].append(load())
    result: dict = {name: median(samples[1:]) for name, samples in times.items()}
    result["cache_dropped"] = dropped
    result["ratio"] = round(result["validated_s"] / result["plain_s"], 2)
    result["warm_ratio"] = round(result["validated_warm_s"] / result["plain_warm_s"], 2)
    result |= {"target": TARGETS["restore"], "met": result["ratio"] <= TARGETS["restore"]}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("/var/tmp"), help="where checkpoints are written")
    parser.add_argument("--state-mib", type=int, default=4096 if torch.cuda.is_available() else 1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--parts", default="blocked,torn,durable,restore", help="comma-separated parts to run")
    parser.add_argument("--keep-page-cache", action="store_true", help="never drop the page cache (restore: warm)")
    parser.add_argument("--out", type=Path, help="results file (default benchmarks/results/...-<device>.json)")
    args = parser.parse_args()
    if args.state_mib < 1 or args.repeat < 1:
        parser.error("--state-mib and --repeat: expected positive integers")
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    out = args.out or REPO / "benchmarks" / "results" / f"checkpoint_staging-{name.split()[-1].lower()}.json"
    root = Path(args.dir) / f"checkpoint-staging-{os.getpid()}"
    root.mkdir(parents=True)
    job = Job(args.state_mib, device)
    results: dict = {
        "command": " ".join(["benchmarks/checkpoint_staging.py", *sys.argv[1:]]),
        "date": datetime.date.today().isoformat(),
        "device": name,
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "state_mib": round(job.bytes / MIB),
        "tensors": len(job.tensors()),
        "repeat": args.repeat,
    }
    cold = functools.partial(restore, cold=not args.keep_page_cache)
    parts = {"blocked": blocked, "torn": torn, "durable": durable, "restore": cold}
    try:
        for part in args.parts.split(","):
            started = time.perf_counter()
            results[part] = parts[part](job, root, args.repeat) if part != "torn" else torn(job, root)
            results[part]["seconds"] = round(time.perf_counter() - started, 1)
            print(part, json.dumps(results[part]), flush=True)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(results, indent=2) + "\n")  # after each part: a run cut short keeps the rest
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
