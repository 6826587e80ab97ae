"""The figures the doctor judges by the design's warning and critical levels (``levels.py``, the platform's alert
defaults too)."""

from __future__ import annotations

from ..levels import LEVELS, Level, Status

Threshold = Level
"""The name 0.2.0 gave a figure's levels (``ai_storage_training.thresholds.Threshold``), kept for its importers."""

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
THRESHOLDS = {name: LEVELS[name] for name in FIGURES}

__all__ = ["FIGURES", "THRESHOLDS", "Status", "Threshold"]
