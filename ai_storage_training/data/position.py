"""DataPosition: where a job is in its data, saved once for every rank and resumed on any number of ranks and
DataLoader workers, every sample of the epoch trained once across the resume.

A DCP ``Stateful`` for the top level of the checkpoint's state dict, under the same key on every rank
(``DataPosition.KEY``): ``state_dict()`` gathers every rank's count of samples each of its workers handed to
training (from torchdata's ``StatefulDataLoader.state_dict()``, which counts only batches the loop took) over
``group`` (give the checkpoints' gloo group when the default one is NCCL), so every rank saves the same entry and DCP
writes it once. ``load_state_dict()`` hands the epoch's runs so far to ``ShardDataset.resume``: the samples they
trained are recomputed from the dataset's orders, and each rank of the new layout continues with its share of the
rest. The dataset must be the same version with the same ``seed`` and ``shuffle_buffer`` (refused in one line
otherwise). Call ``load_state_dict`` (DCP does) before the loader's first iteration; do not also call the loader's
own ``load_state_dict``.
"""

from __future__ import annotations

import json
from typing import Any

import torch.distributed as dist

from .datasets import Segment, ShardDataset


def worker_counts(loader_state: dict[str, Any], workers: int) -> tuple[int | None, list[int]]:
    """(epoch, samples each worker handed to training) in a StatefulDataLoader's ``state_dict()`` (None: the loader
    never ran)."""
    if workers == 0:
        state = loader_state.get("dataset_state") or {}
        return state.get("epoch"), [int(state.get("yielded", 0))]
    snapshots = (loader_state.get("_snapshot") or {}).get("_worker_snapshots") or {}
    states = [(snapshots.get(f"worker_{k}") or {}).get("dataset_state") or {} for k in range(workers)]
    epochs = {s["epoch"] for s in states if "epoch" in s}
    return (epochs.pop() if len(epochs) == 1 else None), [int(s.get("yielded", 0)) for s in states]


class DataPosition:
    """The epoch and every rank's workers' progress through it (see the module's docs)."""

    KEY = "data"
    """The state dict key: the same on every rank (a key naming the rank would not be found on another layout)."""

    def __init__(self, loader: Any, group: Any = None):
        self.loader, self.group = loader, group
        self.dataset: ShardDataset = loader.dataset
        self.epoch = 0
        self._resumed: tuple[int, list[Segment]] = (-1, [])
        """The epoch resumed from a checkpoint and its runs before this one."""

    def _identity(self) -> dict[str, Any]:
        d = self.dataset
        return {"dataset": d.manifest.describe(), "seed": d.seed, "shuffle_buffer": d.shuffle_buffer, "even": d.even}

    def state_dict(self) -> dict[str, Any]:
        workers = self.loader.num_workers
        if getattr(self.loader, "_iterator", None) is None:  # not started: its state_dict() would start the workers
            epoch, counts = None, [0] * max(1, workers)  # (DCP asks for it before loading, before resume())
        else:
            epoch, counts = worker_counts(self.loader.state_dict(), workers)
        mine: dict[str, Any] = {"epoch": self.epoch if epoch is None else epoch, "counts": counts}
        ranks: list[Any] = [mine]
        if dist.is_available() and dist.is_initialized() and dist.get_world_size(self.group) > 1:
            ranks = [None] * dist.get_world_size(self.group)
            dist.all_gather_object(ranks, mine, group=self.group)
        epochs: set[int] = {int(r["epoch"]) for r in ranks}
        if len(epochs) != 1:
            raise RuntimeError(
                f"data position: the ranks are in different epochs ({sorted(epochs)}); save between epochs"
            )
        (at,) = epochs
        earlier = self._resumed[1] if at == self._resumed[0] else []
        now = {"world": len(ranks), "workers": len(counts), "yielded": [r["counts"] for r in ranks]}
        if earlier and (earlier[-1]["world"], earlier[-1]["workers"]) == (now["world"], now["workers"]):
            earlier = earlier[:-1]  # the same layout went on counting from its own segment
        return {"position": json.dumps({**self._identity(), "epoch": at, "segments": [*earlier, now]})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = json.loads(state["position"])
        for key, value in self._identity().items():
            if saved[key] != value:
                raise ValueError(
                    f"{key}: the checkpoint's data position is of {saved[key]!r}, this dataset is {value!r}; resume "
                    "with the same dataset version, seed and shuffle_buffer, or start the epoch again"
                )
        self.epoch = int(saved["epoch"])
        self._resumed = (self.epoch, list(saved["segments"]))
        self.dataset.set_epoch(self.epoch)
        self.dataset.resume(self.epoch, self._resumed[1])
