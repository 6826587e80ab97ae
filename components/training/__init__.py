"""What runs and feeds the training jobs. Read ``trainer`` first: Kubeflow Trainer, its runtimes and the training
namespace. Then ``volcano`` (gang scheduling, per-team queues), ``training_operator_v1`` (PyTorchJob and TFJob),
``jobs`` and ``job_kinds`` (a team's job specs), ``job_volumes`` and ``staging`` (what a job mounts and stages),
``node_pools``, and ``fluid`` with ``fluid_dataset`` (datasets, runtimes, DataLoad pre-warm).

``ai_storage_platform.training`` was the module ``trainer`` is now (0.2.0): its names still load from here, with a
DeprecationWarning, until 0.4.0."""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    """0.2.0's ``from ai_storage_platform.training import Training``: the name from ``trainer``, with a warning."""
    trainer = importlib.import_module(".trainer", __name__)
    if name.startswith("_") or not hasattr(trainer, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"{__name__}.{name} moved to {__name__}.trainer.{name}; the old path goes in 0.4.0",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(trainer, name)
