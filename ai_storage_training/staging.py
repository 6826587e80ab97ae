"""The DCP stagers ``AsyncCheckpointer.save_dcp`` uses: one per save that may be in flight, made once.

Under CUDA a blocking save stages through DCP's cached pinned staging (``BlockingAsyncStager(cache_staged_state_dict=
True)``): pinned host buffers allocated at the first save and reused, so a save blocks for about one device-to-host
copy of the state; host memory needed: the state's size times ``max_in_flight``. Without CUDA a blocking
``DefaultStager`` (its CPU copies allocated once). ``overlap`` stages with ``DefaultStager`` in its thread (its own
CUDA stream, pinned memory) while the job computes.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed._state_dict_utils import CompanionMismatch
from torch.distributed.checkpoint._state_dict_stager import StateDictStager
from torch.distributed.checkpoint.staging import AsyncStager, BlockingAsyncStager, DefaultStager, StagingOptions


def make_stager(overlap: bool) -> tuple[AsyncStager, bool]:
    """The DCP stager of one in-flight save, and whether it may be reused. ``overlap``: DCP's ``DefaultStager``
    staging in a thread (on a CUDA stream of its own, into pinned memory, when CUDA is present). Else, with CUDA:
    DCP's cached pinned staging (``BlockingAsyncStager(cache_staged_state_dict=True)``: pinned buffers allocated
    at the first save, reused; a save blocks for one device-to-host copy); without CUDA a blocking
    ``DefaultStager`` (its CPU copies allocated once). A ``DefaultStager`` is made anew for each save where this
    torch cannot stage twice with one (``KeyError: <class 'type'>`` in torch 2.11)."""
    cuda = torch.cuda.is_available()
    if overlap or not cuda:
        options = StagingOptions(
            use_pinned_memory=cuda, use_shared_memory=False, use_async_staging=overlap, use_non_blocking_copy=cuda
        )
        return DefaultStager(options), _REUSABLE_DEFAULT_STAGER
    return _PinnedStager(), True


_REUSABLE_DEFAULT_STAGER = type in getattr(StateDictStager(), "_deepcopy_dispatch", {})
"""torch 2.11's DefaultStager fails its second stage (it copies ``type`` objects through a dispatch missing it)."""


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
