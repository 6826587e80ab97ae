"""The settings of the platform's alert rules (thresholds, windows, durations) and the shape of one rule: an
alert with its severity, summary and runbook link, or a warning and a critical alert on one figure.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from ..common import versions
from ..common.sections import Problem, Section, Window

DURATION = r"^[0-9]+(ms|s|m|h)$"


class Threshold(Section):
    """A warning and a critical level of one figure."""

    warning: float = Field(ge=0)
    """Level at which the alert fires with severity `warning`."""
    critical: float = Field(ge=0)
    """Level at which the alert fires with severity `critical`."""


class PercentThreshold(Threshold):
    """A warning and a critical level of a percentage (0 to 100)."""

    warning: float = Field(ge=0, le=100)
    """Level at which the alert fires with severity `warning`, %."""
    critical: float = Field(ge=0, le=100)
    """Level at which the alert fires with severity `critical`, %."""


class AlertThresholds(Section):
    """The levels of the data-path alerts (the design reference's monitoring table) and the metadata memory."""

    read_throughput_mb_s: Threshold = Threshold(warning=100, critical=50)
    """FUSE read throughput of a JuiceFS mount that is reading, MB/s; alerts below."""
    read_latency_ms: Threshold = Threshold(warning=100, critical=500)
    """Mean FUSE read latency of a JuiceFS mount, ms; alerts above."""
    cache_hit_ratio_percent: PercentThreshold = PercentThreshold(warning=85, critical=70)
    """Share of read bytes served by the local block cache, %; alerts below."""
    cache_evictions_per_second: Threshold = Threshold(warning=1000, critical=5000)
    """Cache blocks evicted per second; alerts above."""
    metadata_memory_percent: PercentThreshold = PercentThreshold(warning=85, critical=95)
    """Redis memory used of its `maxmemory`, %; alerts above (at 100 % JuiceFS writes fail: noeviction)."""
    prefetch_hit_ratio_percent: PercentThreshold = PercentThreshold(warning=80, critical=60)
    """Share of a training job's reads whose prefetched data was ready, %; alerts below."""
    checkpoint_save_seconds: Threshold = Threshold(warning=30, critical=60)
    """Mean duration of a training job's checkpoint saves, s; alerts above."""
    checkpoint_restore_seconds: Threshold = Threshold(warning=30, critical=60)
    """Mean duration of a training job's checkpoint restores, s; alerts above."""
    checkpoint_save_failure_percent: PercentThreshold = PercentThreshold(warning=5, critical=10)
    """Share of a training job's checkpoint saves that failed, %; alerts above."""
    checkpoint_lag_intervals: Threshold = Threshold(warning=2, critical=4)
    """Checkpoint lag of a training job (since its newest requested checkpoint that is not yet durable), in
    checkpoint intervals (the checkpoint tier's decision record, `tiers.decisions.checkpoint.checkpointInterval`);
    alerts above."""
    storage_goodput_percent: PercentThreshold = PercentThreshold(warning=90, critical=75)
    """Share of a training job's time not lost to storage (data wait, checkpoint blocking, restore, progress lost at
    a restart; the step timer's figures) over `checkpointWindow`, %; alerts below."""
    restore_test_age_hours: Threshold = Threshold(warning=48, critical=168)
    """Hours since the last successful restore test of a checkpoint claim (its restore test CronJob, or a training
    job that reports one); alerts above."""

    def problems(self) -> list[Problem]:
        """A critical level is worse than the warning level."""
        below = (
            "read_throughput_mb_s",
            "cache_hit_ratio_percent",
            "prefetch_hit_ratio_percent",
            "storage_goodput_percent",
        )
        found = []
        for name, info in type(self).model_fields.items():
            t: Threshold = getattr(self, name)
            ok = t.critical < t.warning if name in below else t.critical > t.warning
            if not ok:
                side = "below" if name in below else "above"
                expected = f"expected critical {side} warning ({t.warning:g})"
                found.append(Problem(f"{info.alias}.critical", expected, t.critical, "critical is the worse level"))
        return found


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


def levels(name: str, expr: str, op: str, t: Threshold, for_: str, summary: str) -> list[dict[str, Any]]:
    """A warning and a critical alert on ``expr op level``."""
    return [
        alert(name, f"{expr} {op} {level:g}", severity, for_, summary.replace("{level}", f"{level:g}"))
        for severity, level in (("warning", t.warning), ("critical", t.critical))
    ]
