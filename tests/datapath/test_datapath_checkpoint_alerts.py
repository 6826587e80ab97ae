"""The checkpoint alerts on a real Prometheus: a stand-in training job exports the training library's checkpoint
gauges (``ai_storage_checkpoint_lag_seconds``, ``ai_storage_checkpoint_restore_test_timestamp_seconds``) from its
own registry, and Prometheus evaluates the generated rules every second. A lag of 1.5 checkpoint intervals (of a
2 s interval) stays silent; the lag rises above the warning level and CheckpointLagHigh fires; the lag drops to
0 and it clears. A job
whose last restore test is days old makes CheckpointRestoreTestOverdue pending; a job that never ran one
(its gauge at 0) does not."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import observability
from harness import LOOPBACK, HarnessError, free_port
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from components.observability.alert_rules import RuleSettings, rule_groups

INTERVAL = "2s"
"""The checkpoint interval of the rules under test: warning above 2 intervals (4 s), critical above 4 (8 s)."""
LAG = 'ALERTS{alertname="CheckpointLagHigh",alertstate="firing"}'
OVERDUE = 'ALERTS{alertname="CheckpointRestoreTestOverdue"}'


@contextlib.contextmanager
def checkpoint_exporter(restore_test_timestamp: float) -> Iterator[tuple[int, Gauge]]:
    """A loopback /metrics with the two gauges in a registry of its own; yields its port and the lag gauge."""
    registry = CollectorRegistry()
    lag = Gauge("ai_storage_checkpoint_lag_seconds", "Checkpoint lag.", registry=registry)
    tested = Gauge("ai_storage_checkpoint_restore_test_timestamp_seconds", "Last restore test.", registry=registry)
    tested.set(restore_test_timestamp)
    port = free_port()
    server, thread = start_http_server(port, LOOPBACK, registry=registry)
    try:
        yield port, lag
    finally:
        server.shutdown()
        thread.join(5)


def wait_for(what: str, check: Callable[[], bool], timeout: float = 20) -> float:
    """Seconds until ``check()`` holds (polled every 0.25 s); fail naming ``what`` after ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return time.monotonic() - start
        time.sleep(0.25)
    raise HarnessError(f"{what}: not within {timeout}s")


def test_the_lag_alert_fires_while_saves_fall_behind_and_clears_after_they_catch_up(tmp_path):
    settings = RuleSettings()
    groups = rule_groups(settings, replicas=None, ceph=False, volcano=False, checkpoint_interval=INTERVAL)
    levels = settings.thresholds.checkpoint_lag_intervals
    behind = (levels.warning + levels.critical) / 2 * 2  # seconds: between the levels (interval 2 s)
    days_ago = time.time() - 8 * 86400
    with (
        checkpoint_exporter(days_ago) as (slow_port, lag),
        checkpoint_exporter(0) as (never_port, _),
        observability.prometheus({"slow": slow_port, "never": never_port}, groups, tmp_path / "prometheus") as prom,
    ):
        prom.wait_targets_up(2)
        lag.set(levels.warning * 2 * 0.75)  # below the level: 1.5 intervals (a level in seconds would fire)
        time.sleep(4)
        assert prom.query(LAG) == []
        lag.set(behind)
        fired = wait_for("CheckpointLagHigh firing", lambda: bool(prom.query(LAG)))
        firing = prom.query(LAG)
        lag.set(0)
        cleared = wait_for("CheckpointLagHigh cleared", lambda: prom.query(LAG) == [])
        overdue = prom.query(OVERDUE)
    print(f"lag {behind:g}s: fired after {fired:.1f}s; lag 0: cleared after {cleared:.1f}s")
    assert {(a["metric"]["job"], a["metric"]["severity"]) for a in firing} == {("slow", "warning")}
    # Eight days without a restore test: both levels (48 h, 168 h) pending (for: 5m); a job that never ran one: nothing.
    assert {(a["metric"]["job"], a["metric"]["severity"], a["metric"]["alertstate"]) for a in overdue} == {
        ("slow", "warning", "pending"),
        ("slow", "critical", "pending"),
    }
