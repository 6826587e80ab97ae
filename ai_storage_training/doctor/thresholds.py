"""The design's warning and critical levels (``levels.py``, the platform's alert defaults too), as the doctor
judges its figures."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..levels import LEVELS

Status = Literal["ok", "warning", "critical"]


@dataclass(frozen=True)
class Threshold:
    """A warning and a critical level; ``below``: the figure is bad when under them (else when over)."""

    warning: float
    critical: float
    below: bool = False

    def judge(self, value: float) -> Status:
        """``ok``, ``warning`` or ``critical`` for ``value``."""
        worse = (lambda level: value < level) if self.below else (lambda level: value > level)
        if worse(self.critical):
            return "critical"
        return "warning" if worse(self.warning) else "ok"

    def describe(self) -> str:
        """``warning < 100, critical < 50``."""
        op = "<" if self.below else ">"
        return f"warning {op} {self.warning:g}, critical {op} {self.critical:g}"


FIGURES = (
    "read_throughput_mb_s",
    "read_latency_ms",
    "cache_hit_ratio_percent",
    "prefetch_hit_ratio_percent",
    "checkpoint_save_seconds",
    "checkpoint_restore_seconds",
    "checkpoint_save_failure_percent",
)
"""The figures the doctor measures, by the name of the platform's alert threshold setting."""
THRESHOLDS = {name: Threshold(*LEVELS[name]) for name in FIGURES}
