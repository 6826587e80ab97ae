"""Step timing: where a training step's time goes, and how much of the run storage costs (storage goodput).

Two lines in a training loop::

    timer = StepTimer(start_step=step)          # the step the job resumes from (0 on a fresh start)
    for batch in timer.iterate(loader):         # the loader (or any iterable of batches)
        ...                                     # forward, backward, optimizer step, checkpoint saves

A step runs from one batch request to the next (the first, which waits for the loader to start, is not timed). Per
step the timer measures the time the loop waited for its batch (``data wait``), the time it was blocked in
checkpoint saves (the checkpointer's own measure), and the rest (``compute``). These are host-side times: on CUDA,
kernels run asynchronously, so a loop that never synchronizes may wait for data while its GPU still works; the
GPU's busy fraction (NVML, ``gpu.py``) says how busy it was.
The data loader's own time is split into waiting for storage reads (``ShardDataset``, ``PrefetchingReader``,
``read_file``) and decoding/transforming (``ShardDataset``'s ``transform``, ``timed``): a CPU-bound loader is
told from a storage-bound one. DataLoader workers report through ``$PROMETHEUS_MULTIPROC_DIR`` (``metrics.py``).

Storage goodput is the fraction of the run's time not lost to storage: the data wait's storage part (the loader's
read share of its time; the rest, decoding and transforms, is the CPU's and is reported beside it), checkpoint
blocking, checkpoint restore, and the progress lost at a restart. The last is the steps the previous run went past
the checkpoint this one resumes from, times their step time: the timer records the step reached and the mean step
time in ``<checkpoint dir>/.steps.json`` (rank 0, at most every ``record_every`` seconds) and reads it back at the
start.

Everything is exported as training metrics, and every ``log_every`` steps a line goes to the log.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from . import metrics
from .gpu import GpuSampler

T = TypeVar("T")
PROGRESS_FILE = ".steps.json"
LOADER_FIGURES = ("ai_storage_read_seconds_sum", "ai_storage_loader_transform_seconds_total")


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of ``path``, the read counted as the data loader's storage time (for datasets of plain files)."""
    started = time.perf_counter()
    with open(path, "rb") as f:
        data = f.read()
    metrics.READ_SECONDS.observe(time.perf_counter() - started)
    metrics.READ_BYTES.inc(len(data))
    return data


class timed:  # noqa: N801  (used as a function: timed(transform))
    """``transform``, its time counted as the data loader's decode/transform time (picklable, for DataLoader
    workers started by spawn or forkserver)."""

    def __init__(self, transform: Callable[[Any], Any]):
        self.transform = transform

    def __call__(self, sample: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.transform(sample)
        finally:
            metrics.TRANSFORM_SECONDS.inc(time.perf_counter() - started)
            metrics.SAMPLES.inc()


def loader_totals() -> tuple[float, float]:
    """(seconds the data loader waited for storage, seconds it transformed) so far, DataLoader workers included
    when ``$PROMETHEUS_MULTIPROC_DIR`` is set."""
    found = dict.fromkeys(LOADER_FIGURES, 0.0)
    for family in metrics.registry().collect():
        for sample in family.samples:
            if sample.name in found:
                found[sample.name] += sample.value
    return found[LOADER_FIGURES[0]], found[LOADER_FIGURES[1]]


def read_share(read: float, transform: float) -> float:
    """The share of the data loader's time spent waiting for storage reads (the rest is CPU: decoding, transforms);
    1 when its split is unknown (no loader figures: the whole data wait is taken for storage's)."""
    return read / (read + transform) if read + transform > 0 else 1.0


def storage_goodput(
    step: float, wait: float, checkpoint: float, restore: float, lost: float, reads: float = 1.0
) -> float:
    """The fraction of a run's time not lost to storage: its steps (``step`` seconds, of which ``wait`` waiting
    for data, storage's part of it ``reads`` (:func:`read_share`), and ``checkpoint`` blocked in saves), its
    ``restore`` and the ``lost`` progress of a restart. A loader waiting on its CPU is not storage's loss."""
    wall = step + restore + lost
    return 1.0 - (wait * reads + checkpoint + restore + lost) / wall if wall > 0 else 1.0


def read_progress(directory: str | os.PathLike[str]) -> tuple[int, float, float] | None:
    """(step reached, mean step seconds, Unix time written) of the step timer's record in ``directory``; None
    without one; ValueError (or KeyError, TypeError) when it cannot be read as one."""
    try:
        record = json.loads((Path(directory) / PROGRESS_FILE).read_text())
    except FileNotFoundError:
        return None
    return int(record["step"]), float(record["step_seconds"]), float(record["time"])


def _rank() -> int:
    torch_distributed = sys.modules.get("torch.distributed")
    if torch_distributed is not None and torch_distributed.is_available() and torch_distributed.is_initialized():
        return int(torch_distributed.get_rank())
    return int(os.environ.get("RANK", "0") or 0)


class StepTimer:
    """Time the steps of one training loop (see the module's docstring). ``step``: the step of the batch the loop
    holds (``start_step + 1`` for the first); ``figures()``: the totals."""

    def __init__(
        self,
        *,
        start_step: int = 0,
        log_every: int = 100,
        progress_dir: str | os.PathLike[str] | None = None,
        record_every: float = 10.0,
        log: Callable[[str], None] | None = None,
    ):
        for name, value, low in (("start_step", start_step, 0), ("log_every", log_every, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name}: expected an integer >= {low}; got {value!r}")
        if isinstance(record_every, bool) or not isinstance(record_every, (int, float)) or record_every <= 0:
            raise ValueError(f"record_every: expected seconds > 0; got {record_every!r}")
        directory = progress_dir if progress_dir is not None else os.environ.get("AI_STORAGE_CHECKPOINT_DIR")
        self.progress_path = Path(directory) / PROGRESS_FILE if directory else None
        self.step, self.log_every, self.record_every = start_step, log_every, record_every
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.totals = {"steps": 0, "step": 0.0, "wait": 0.0, "checkpoint": 0.0}
        self.lost_seconds = 0.0
        self._gpu: GpuSampler | None = None
        self._gpu_samples: list[float] = []
        self._recorded = 0.0
        self._window: dict[str, float] = {}
        self._loader_start = (0.0, 0.0)  # the loader's (read, transform) seconds when this timer's run began

    def iterate(self, batches: Iterable[T]) -> Iterator[T]:
        """Yield the batches of ``batches``, timing each step (call it again for each epoch: the same timer
        goes on counting)."""
        first = self._gpu is None  # the run's first batch: the loader starts, not a step's wait
        if first:
            self._gpu = GpuSampler()
            if self._gpu.reason:
                self.log(f"steps: no GPU figure: {self._gpu.reason}")
            if getattr(batches, "num_workers", 0) and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
                self.log(
                    "steps: the loader's read/transform split needs $PROMETHEUS_MULTIPROC_DIR (DataLoader workers)"
                )
            self._count_lost_progress()
            self._window = self._snapshot()
            self._loader_start = (self._window["read"], self._window["transform"])
        source = iter(batches)
        blocked = metrics.process_total("blocked")
        asked = time.perf_counter()
        try:
            while True:
                try:
                    batch = next(source)
                except StopIteration:
                    return
                got = time.perf_counter()
                self.step += 1  # the step this batch is for
                yield batch
                now, blocked_now = time.perf_counter(), metrics.process_total("blocked")
                if first:
                    first = False
                else:
                    self._count(now - asked, got - asked, blocked_now - blocked)
                asked, blocked = now, blocked_now
        finally:
            self._record(force=True)

    def _count(self, step: float, wait: float, checkpoint: float) -> None:
        t = self.totals
        t["steps"] += 1
        t["step"] += step
        t["wait"] += wait
        t["checkpoint"] += checkpoint
        metrics.STEPS.inc()
        metrics.STEP_SECONDS.inc(step)
        metrics.DATA_WAIT_SECONDS.inc(wait)
        if checkpoint:
            metrics.CHECKPOINT_WAIT_SECONDS.inc(checkpoint)
        if self._gpu is not None and self.step % max(1, self.log_every // 10) == 0:
            sampled = self._gpu.sample()
            if sampled is not None:
                self._gpu_samples.append(sampled[0])
        if self.step % self.log_every == 0:
            metrics.GOODPUT.set(self.goodput())
            self.log(self.line())
            self._record()

    def goodput(self) -> float:
        """Fraction of this run's time (its steps, its restore, the progress a restart lost) not lost to storage."""
        (read, transform), (read_0, transform_0) = loader_totals(), self._loader_start
        t, reads = self.totals, read_share(read - read_0, transform - transform_0)
        return storage_goodput(
            t["step"], t["wait"], t["checkpoint"], metrics.process_total("restore"), self.lost_seconds, reads
        )

    def _snapshot(self) -> dict[str, float]:
        read, transform = loader_totals()
        return {**self.totals, "read": read, "transform": transform}

    def line(self) -> str:
        """The log line: the figures of the steps since the last line."""
        now, before = self._snapshot(), self._window
        self._window = now
        d = {key: now[key] - before.get(key, 0.0) for key in now}
        step = d["step"] or 1e-12
        loader = d["read"] + d["transform"]
        split = (
            f" (loader: read {100 * d['read'] / loader:.0f} %, transform {100 * d['transform'] / loader:.0f} %)"
            if loader > 0
            else ""
        )
        gpu = f"{100 * sum(self._gpu_samples) / len(self._gpu_samples):.0f} %" if self._gpu_samples else "n/a"
        self._gpu_samples = []
        compute = max(0.0, 1.0 - (d["wait"] + d["checkpoint"]) / step)
        on_cpu = d["wait"] * (1 - read_share(d["read"], d["transform"])) / step
        return (
            f"step {self.step}: {step / max(d['steps'], 1):.3f} s/step over {int(d['steps'])} | data wait "
            f"{100 * d['wait'] / step:.0f} %{split} | checkpoint {100 * d['checkpoint'] / step:.0f} % | compute "
            f"{100 * compute:.0f} % | GPU busy {gpu} | storage goodput {100 * self.goodput():.0f} % (data wait on "
            f"CPU {100 * on_cpu:.0f} %)"
        )

    def _record(self, force: bool = False) -> None:
        """Rank 0 writes the step reached and the mean step time (read back by the next run's timer)."""
        now = time.monotonic()
        if self.progress_path is None or _rank() != 0 or not self.totals["steps"]:
            return
        if not force and now - self._recorded < self.record_every:
            return
        self._recorded = now
        record = {"step": self.step, "step_seconds": self.totals["step"] / self.totals["steps"], "time": time.time()}
        temporary = self.progress_path.with_name(f"{PROGRESS_FILE}.{os.getpid()}.tmp")
        try:
            temporary.parent.mkdir(parents=True, exist_ok=True)  # the first save makes it, maybe after this
            temporary.write_text(json.dumps(record))
            os.replace(temporary, self.progress_path)
        except OSError as e:  # the figures are worth less than the training: say it and go on
            self.log(f"steps: cannot record progress in {self.progress_path}: {e}")

    def _count_lost_progress(self) -> None:
        """The previous run's steps past ``start_step``, at its step time, counted as lost progress."""
        if self.progress_path is None:
            return
        try:
            found = read_progress(self.progress_path.parent)
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.log(f"steps: ignoring {self.progress_path} ({e}); no lost progress counted")
            return
        if found is None:
            return
        reached, step_seconds, _ = found
        if reached > self.step:
            self.lost_seconds = (reached - self.step) * step_seconds
            metrics.LOST_PROGRESS_SECONDS.inc(self.lost_seconds)
            self.log(
                f"steps: the previous run reached step {reached}; resuming at {self.step} loses "
                f"{reached - self.step} steps (~{self.lost_seconds:.0f} s at {step_seconds:.3f} s/step)"
            )

    def figures(self) -> dict[str, float]:
        """The totals so far: steps, seconds of steps, data wait, checkpoint, lost progress, storage goodput."""
        return {**self.totals, "lost": self.lost_seconds, "goodput": self.goodput()}


def progress_at_risk(directory: str | os.PathLike[str], newest_step: int | None) -> dict[str, Any] | None:
    """What a restart now would lose: the step the job reached (its step timer's record in ``directory``) past
    ``newest_step`` (the newest committed checkpoint), in steps and seconds; None without a record."""
    try:
        found = read_progress(directory)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if found is None:
        return None
    reached, step_seconds, when = found
    lost = max(0, reached - (newest_step or 0))
    return {
        "reached_step": reached,
        "recorded_seconds_ago": round(max(0.0, time.time() - when), 1),
        "resume_step": newest_step,
        "steps_lost": lost,
        "seconds_lost": round(lost * step_seconds, 1),
    }


def risk_line(risk: dict[str, Any]) -> str:
    """``progress_at_risk`` as a person reads it."""
    return (
        f"progress at risk: the job reached step {risk['reached_step']} ({risk['recorded_seconds_ago']:.0f} s ago); "
        f"a restart now resumes at {risk['resume_step'] if risk['resume_step'] is not None else 'the start'} and "
        f"loses {risk['steps_lost']} steps (~{risk['seconds_lost']:.0f} s)"
    )
