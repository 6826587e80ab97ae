"""The settings of the platform's alert rules (thresholds, windows, durations) and the shape of one rule: an
alert with its severity, summary and runbook link, or a warning and a critical alert on one figure.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field

from ai_storage_training.levels import LEVELS

from ..common import versions
from ..common.sections import Problem, Section, Window

DURATION = r"^[0-9]+(ms|s|m|h)$"


class Threshold(Section):
    """A warning and a critical level of one figure that alerts above them (its bad side: ``OP``)."""

    OP: ClassVar[Literal[">", "<"]] = ">"
    """How the rule compares the figure with a level: ``>`` alerts above it, ``<`` below."""
    warning: float = Field(ge=0)
    """Level at which the alert fires with severity `warning`."""
    critical: float = Field(ge=0)
    """Level at which the alert fires with severity `critical`."""

    def problems(self) -> list[Problem]:
        """The critical level is on the bad side of the warning level."""
        worse = self.critical > self.warning if self.OP == ">" else self.critical < self.warning
        if worse:
            return []
        side = "above" if self.OP == ">" else "below"
        expected = f"expected critical {side} warning ({self.warning:g})"
        return [Problem("critical", expected, self.critical, "critical is the worse level")]


class FloorThreshold(Threshold):
    """A warning and a critical level of one figure that alerts below them."""

    OP: ClassVar[Literal[">", "<"]] = "<"


class PercentThreshold(Threshold):
    """A warning and a critical level of a percentage (0 to 100) that alerts above them."""

    warning: float = Field(ge=0, le=100)
    """Level at which the alert fires with severity `warning`, %."""
    critical: float = Field(ge=0, le=100)
    """Level at which the alert fires with severity `critical`, %."""


class PercentFloorThreshold(PercentThreshold):
    """A warning and a critical level of a percentage (0 to 100) that alerts below them."""

    OP: ClassVar[Literal[">", "<"]] = "<"


ThresholdType = TypeVar("ThresholdType", bound=Threshold)


def design(name: str, kind: type[ThresholdType]) -> ThresholdType:
    """The design's levels of ``name`` (``ai_storage_training.levels``, the doctor's too) as a ``kind``, whose bad
    side must be the levels' (a type on the wrong side fails at import)."""
    level = LEVELS[name]
    if (kind.OP == "<") != level.below:
        raise TypeError(f"{name}: {kind.__name__} alerts {kind.OP} its levels; the design's are bad the other way")
    return kind(warning=level.warning, critical=level.critical)


class AlertThresholds(Section):
    """The levels of the data-path alerts (the design reference's monitoring table) and the metadata memory; each
    defaults to the design's (``ai_storage_training/levels.py``)."""

    read_throughput_mb_s: FloorThreshold = design("read_throughput_mb_s", FloorThreshold)
    """FUSE read throughput of a JuiceFS mount that is reading, MB/s; alerts below."""
    read_latency_ms: Threshold = design("read_latency_ms", Threshold)
    """Mean FUSE read latency of a JuiceFS mount, ms; alerts above."""
    cache_hit_ratio_percent: PercentFloorThreshold = design("cache_hit_ratio_percent", PercentFloorThreshold)
    """Share of read bytes served by the local block cache, %; alerts below."""
    cache_evictions_per_second: Threshold = design("cache_evictions_per_second", Threshold)
    """Cache blocks evicted per second; alerts above."""
    metadata_memory_percent: PercentThreshold = design("metadata_memory_percent", PercentThreshold)
    """Redis memory used of its `maxmemory`, %; alerts above (at 100 % JuiceFS writes fail: noeviction)."""
    prefetch_hit_ratio_percent: PercentFloorThreshold = design("prefetch_hit_ratio_percent", PercentFloorThreshold)
    """Share of a training job's reads whose prefetched data was ready, %; alerts below."""
    checkpoint_save_seconds: Threshold = design("checkpoint_save_seconds", Threshold)
    """Mean duration of a training job's checkpoint saves, s; alerts above."""
    checkpoint_restore_seconds: Threshold = design("checkpoint_restore_seconds", Threshold)
    """Mean duration of a training job's checkpoint restores, s; alerts above."""
    checkpoint_save_failure_percent: PercentThreshold = design("checkpoint_save_failure_percent", PercentThreshold)
    """Share of a training job's checkpoint saves that failed, %; alerts above."""
    checkpoint_lag_intervals: Threshold = design("checkpoint_lag_intervals", Threshold)
    """Checkpoint lag of a training job (since its newest requested checkpoint that is not yet durable), in
    checkpoint intervals (the checkpoint tier's decision record, `tiers.decisions.checkpoint.checkpointInterval`);
    alerts above."""
    storage_goodput_percent: PercentFloorThreshold = design("storage_goodput_percent", PercentFloorThreshold)
    """Share of a training job's time not lost to storage (data wait, checkpoint blocking, restore, progress lost at
    a restart; the step timer's figures) over `checkpointWindow`, %; alerts below."""
    restore_test_age_hours: Threshold = design("restore_test_age_hours", Threshold)
    """Hours since the last successful restore test of a checkpoint claim (its restore test CronJob, or a training
    job that reports one); alerts above."""


class RuleSettings(Section):
    """How the rules evaluate: rate windows and how long a condition must last."""

    window: Window = "5m"
    """Range of the rates the rules compute (e.g. `5m`)."""
    pending_for: str = Field("10m", pattern=DURATION)
    """How long a data-path condition must hold before its alert fires."""
    gang_pending_for: str = Field("30m", pattern=DURATION)
    """How long a gang-scheduled job may wait in a Volcano queue before the alert fires."""
    checkpoint_window: Window = "1h"
    """Range over which checkpoint save and restore times and the save failure rate are averaged (saves are
    minutes apart, so longer than `window`)."""
    gpu_busy_percent: float = Field(80, gt=0, le=100)
    """GPU utilisation below which a training job that waits for data longer than it computes is input-bound (the
    design's 80 %): `TrainingInputBound`, `TrainingLoaderCPUBound`."""
    thresholds: AlertThresholds = AlertThresholds()
    """Warning and critical levels."""
    runbook_url: str = Field(versions.DOCS_URL + "/alerts.md", pattern=r"^https://[^\s#]+$")
    """Absolute `https://` URL where docs/alerts.md is served (default: this release's page in the project's
    repository; set your Git host's copy); each alert's `runbook_url` is it plus the alert's section anchor."""


def seconds(duration: str) -> float:
    """A ``DURATION`` (``90s``, ``15m``, ``2h``) in seconds."""
    match = re.fullmatch(r"([0-9]+)(ms|s|m|h)", duration)
    if match is None:
        raise ValueError(f"expected a duration such as 15m; got {duration!r}")
    return int(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]


def alert(name: str, expr: str, severity: str, for_: str, summary: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "runbook_url": f"#{name.lower()}"},
    }


def with_runbook(rules: list[dict[str, Any]], base: str) -> list[dict[str, Any]]:
    """The alerts' runbook links made absolute: ``base`` followed by the alert's section anchor."""
    for rule in rules:
        if "alert" in rule:
            rule["annotations"]["runbook_url"] = base + rule["annotations"]["runbook_url"]
    return rules


def levels(name: str, expr: str, t: Threshold, for_: str, summary: str) -> list[dict[str, Any]]:
    """A warning and a critical alert on ``expr`` past each level of ``t`` (on its bad side, ``t.OP``)."""
    return [
        alert(name, f"{expr} {t.OP} {level:g}", severity, for_, summary.replace("{level}", f"{level:g}"))
        for severity, level in (("warning", t.warning), ("critical", t.critical))
    ]
