"""The design's warning and critical levels, as the doctor judges its figures.

The same numbers are the defaults of the platform's alert rules (``components/observability/alert_rules.py``
``AlertThresholds``; a test keeps them equal): this library imports nothing of the platform.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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


THRESHOLDS = {
    "read_throughput_mb_s": Threshold(100, 50, below=True),
    "read_latency_ms": Threshold(100, 500),
    "cache_hit_ratio_percent": Threshold(85, 70, below=True),
    "prefetch_hit_ratio_percent": Threshold(80, 60, below=True),
    "checkpoint_save_seconds": Threshold(30, 60),
    "checkpoint_restore_seconds": Threshold(30, 60),
    "checkpoint_save_failure_percent": Threshold(5, 10),
}
"""By the name of the platform's alert threshold setting."""
