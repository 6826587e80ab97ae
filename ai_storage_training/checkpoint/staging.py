"""The DCP stagers ``AsyncCheckpointer.save_dcp`` uses: one per save that may be in flight, made once.

Under CUDA a blocking save stages through DCP's cached pinned staging (``BlockingAsyncStager(cache_staged_state_dict=
True)``): pinned host buffers allocated at the first save and reused, so a save blocks for about one device-to-host
copy of the state; host memory needed: the state's size times ``max_in_flight``. Without CUDA a blocking
``DefaultStager`` (its CPU copies allocated once). ``overlap`` stages with ``DefaultStager`` in its thread (its own
CUDA stream, pinned memory) while the job computes.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed._state_dict_utils import CompanionMismatch
from torch.distributed.checkpoint.staging import AsyncStager, BlockingAsyncStager, DefaultStager, StagingOptions


def make_stager(overlap: bool) -> AsyncStager:
    """The DCP stager of one in-flight save, made once and reused. ``overlap``: DCP's ``DefaultStager`` staging in
    its thread (on a CUDA stream of its own, into pinned memory, when CUDA is present; :func:`check_overlap` refuses
    a torch where it fails). Else, with CUDA: DCP's cached pinned staging (``BlockingAsyncStager(
    cache_staged_state_dict=True)``: pinned buffers allocated at the first save, reused; a save blocks for one
    device-to-host copy); without CUDA a blocking ``DefaultStager`` (its CPU copies allocated once), or where it
    fails a ``BlockingAsyncStager`` (a new CPU copy per save)."""
    cuda = torch.cuda.is_available()
    if overlap:
        return DefaultStager(StagingOptions(cuda, False, True, cuda))  # pinned, not shared, async, non-blocking
    if cuda:
        return _PinnedStager()
    return DefaultStager(StagingOptions(False, False, False, False)) if DEFAULT_STAGER_WORKS else BlockingAsyncStager()


DEFAULT_STAGER_WORKS = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 13)
"""DCP's DefaultStager staged a model's and its AdamW's state in torch 2.13 (the CPU build the tests run); in torch
2.11 it failed with ``KeyError: <class 'type'>`` (on an H200, benchmarks/results/checkpoint_staging-h200.json)."""


def check_overlap() -> None:
    """ValueError naming the torch version where ``overlap`` (DCP's DefaultStager) cannot work."""
    if not DEFAULT_STAGER_WORKS:
        raise ValueError(
            f"overlap: DCP's DefaultStager in torch {torch.__version__} fails to stage a model's and optimizer's "
            "state (KeyError: <class 'type'>); use overlap=False (blocking, pinned staging) or torch 2.13 or newer"
        )


class _PinnedStager(BlockingAsyncStager):
    """DCP's cached pinned staging, made again when the state's shape changes (e.g. the optimizer's state appears
    at its first step), which the cache refuses."""

    def __init__(self) -> None:
        super().__init__(cache_staged_state_dict=True)

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        try:
            return super().stage(state_dict)
        except (CompanionMismatch, RuntimeError):
            self.state_dict_cache = None
            return super().stage(state_dict)


def sync_device() -> None:
    """Wait for the kernels queued on the current CUDA stream (none without CUDA)."""
    if torch.cuda.is_available():
        torch.cuda.current_stream().synchronize()


@dataclass
class Slot:
    """One in-flight save's DCP stager and process group (each made once, reused) and the save that uses it."""

    stager: Any = None
    upload: Future | None = None
    group: Any = None

    def group_for(self, base: Any) -> Any:
        """This slot's own process group: the members and backend of ``base`` (the caller's ``process_group``), or
        every rank over gloo (none given: the training's default group may be NCCL, and is busy with the training's
        own collectives). Made at the slot's first save, which every rank reaches in the same order
        (``torch.distributed.new_group`` is collective)."""
        if not dist.is_initialized():
            return base  # one process: no collectives
        if self.group is None:
            ranks = dist.get_process_group_ranks(base) if base is not None else None
            self.group = dist.new_group(
                ranks=ranks, backend=str(dist.get_backend(base)) if base is not None else "gloo"
            )
        return self.group

    def close(self) -> None:
        if self.stager is not None:
            self.stager.close()
            self.stager = None
