"""The design's warning and critical levels of the data-path and training figures, in one place: the platform's
alert rules take them as their defaults (``components/observability/alert_settings.py``) and the storage doctor
judges its figures by them (``doctor/thresholds.py``). Standard library only: the platform imports it, and this
library imports nothing of the platform."""

from __future__ import annotations

from typing import Literal, NamedTuple

Status = Literal["ok", "warning", "critical"]


class Level(NamedTuple):
    """A warning and a critical level; ``below``: the figure is bad under them (else over them)."""

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


LEVELS = {
    "read_throughput_mb_s": Level(100, 50, below=True),
    "read_latency_ms": Level(100, 500),
    "cache_hit_ratio_percent": Level(85, 70, below=True),
    "cache_evictions_per_second": Level(1000, 5000),
    "metadata_memory_percent": Level(85, 95),
    "prefetch_hit_ratio_percent": Level(80, 60, below=True),
    "checkpoint_save_seconds": Level(30, 60),
    "checkpoint_restore_seconds": Level(30, 60),
    "checkpoint_save_failure_percent": Level(5, 10),
    "checkpoint_lag_intervals": Level(2, 4),
    "storage_goodput_percent": Level(90, 75, below=True),
    "restore_test_age_hours": Level(48, 168),
}
"""By the name of the platform's alert threshold setting (``monitoring.rules.thresholds``, snake case)."""
