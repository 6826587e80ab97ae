"""What a checkpoint's marker records besides its files: when the step was committed and the training metrics the
job saved with it (``commit.Marker``), checked before anything is written."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
MAX_METRICS = 32


def checked_metrics(metrics: Mapping[str, Any] | None) -> dict[str, float]:
    """``metrics`` as the marker records them: at most 32 finite numbers by name; ValueError naming what is
    wrong (checked when the save is asked for, before anything is written)."""
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping) or len(metrics) > MAX_METRICS:
        raise ValueError(f"metrics: expected a dict of at most {MAX_METRICS} numbers by name; got {metrics!r}")
    checked = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or not METRIC_NAME.fullmatch(name):
            raise ValueError(f"metrics: name {name!r}: expected letters, digits, '_', '.', '-' (64 at most)")
        number = value.item() if hasattr(value, "item") else value  # a 0-d tensor or numpy scalar
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number):
            raise ValueError(f"metrics: {name}: expected a finite number; got {value!r}")
        checked[name] = number
    return checked


def utc_now() -> str:
    """The time a marker records (ISO 8601, UTC, whole seconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
