"""Alert rules of the platform (Prometheus rule groups), from metrics real exporters emit.

The data path is watched from the JuiceFS clients (the CSI mount pods, `juicefs mount --metrics`): read
throughput and latency, cache hit ratio and evictions, cache blocks dropped because the cache disk is full,
object store request errors. The metadata engine from redis_exporter beside every Redis and Sentinel: down,
memory near its limit, persistence failing, a replica's link down, replicas missing, a failover, the Sentinels'
quorum lost. Ceph from the Rook mgr module (`ceph_health_status`), gang scheduling from the Volcano scheduler
(`volcano_queue_pod_group_pending_count`). Thresholds come from settings (the design reference's table).
Each alert carries a ``runbook_url`` annotation to its section of docs/alerts.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .section import Problem, Section

DURATION = r"^[0-9]+(ms|s|m|h)$"


class Threshold(Section):
    """A warning and a critical level of one figure."""

    warning: float
    """Level at which the alert fires with severity `warning`."""
    critical: float
    """Level at which the alert fires with severity `critical`."""


class AlertThresholds(Section):
    """The levels of the data-path alerts (the design reference's monitoring table) and the metadata memory."""

    read_throughput_mb_s: Threshold = Threshold(warning=100, critical=50)
    """FUSE read throughput of a JuiceFS mount that is reading, MB/s; alerts below."""
    read_latency_ms: Threshold = Threshold(warning=100, critical=500)
    """Mean FUSE read latency of a JuiceFS mount, ms; alerts above."""
    cache_hit_ratio_percent: Threshold = Threshold(warning=85, critical=70)
    """Share of read bytes served by the local block cache, %; alerts below."""
    cache_evictions_per_second: Threshold = Threshold(warning=1000, critical=5000)
    """Cache blocks evicted per second; alerts above."""
    metadata_memory_percent: Threshold = Threshold(warning=85, critical=95)
    """Redis memory used of its `maxmemory`, %; alerts above (at 100 % JuiceFS writes fail: noeviction)."""

    def problems(self) -> list[Problem]:
        """A critical level is worse than the warning level."""
        below = ("read_throughput_mb_s", "cache_hit_ratio_percent")
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

    window: str = Field("5m", pattern=DURATION)
    """Range of the rates the rules compute (e.g. `5m`)."""
    pending_for: str = Field("10m", pattern=DURATION)
    """How long a data-path condition must hold before its alert fires."""
    gang_pending_for: str = Field("30m", pattern=DURATION)
    """How long a gang-scheduled job may wait in a Volcano queue before the alert fires."""
    thresholds: AlertThresholds = AlertThresholds()
    """Warning and critical levels."""
    runbook_url: str = "docs/alerts.md"
    """Where docs/alerts.md is served (e.g. its URL in your Git host); each alert links to its section there."""


def _alert(name: str, expr: str, severity: str, for_: str, summary: str) -> dict[str, Any]:
    return {
        "alert": name,
        "expr": expr,
        "for": for_,
        "labels": {"severity": severity},
        "annotations": {"summary": summary, "runbook_url": f"#{name.lower()}"},
    }


def _with_runbook(rules: list[dict[str, Any]], base: str) -> list[dict[str, Any]]:
    """The alerts' runbook links made absolute: ``base`` followed by the alert's section anchor."""
    for rule in rules:
        if "alert" in rule:
            rule["annotations"]["runbook_url"] = base + rule["annotations"]["runbook_url"]
    return rules


def _levels(name: str, expr: str, op: str, t: Threshold, for_: str, summary: str) -> list[dict[str, Any]]:
    """A warning and a critical alert on ``expr op level``."""
    return [
        _alert(name, f"{expr} {op} {level:g}", severity, for_, summary.format(level=f"{level:g}"))
        for severity, level in (("warning", t.warning), ("critical", t.critical))
    ]


def recording_rules(window: str) -> list[dict[str, Any]]:
    """Per-mount figures of the JuiceFS clients, computed once for the alerts and the dashboards."""
    w = window
    return [
        {"record": "ai_storage:juicefs_read_bytes:rate", "expr": f"rate(juicefs_fuse_read_size_bytes_sum[{w}])"},
        {
            "record": "ai_storage:juicefs_reads:rate",
            "expr": f'sum without (method) (rate(juicefs_fuse_ops_total{{method="read"}}[{w}]))',
        },
        {
            "record": "ai_storage:juicefs_read_latency_seconds:mean",
            "expr": f'sum without (method) (rate(juicefs_fuse_ops_durations_seconds{{method="read"}}[{w}]))'
            f' / sum without (method) (rate(juicefs_fuse_ops_total{{method="read"}}[{w}]))',
        },
        {
            "record": "ai_storage:juicefs_cache_hit_ratio",
            "expr": f"rate(juicefs_blockcache_hit_bytes[{w}]) / (rate(juicefs_blockcache_hit_bytes[{w}])"
            f" + rate(juicefs_blockcache_miss_bytes[{w}]))",
        },
        {"record": "ai_storage:juicefs_cache_evictions:rate", "expr": f"rate(juicefs_blockcache_evicts[{w}])"},
    ]


def data_path_alerts(s: RuleSettings) -> list[dict[str, Any]]:
    """The design reference's data-path alerts, on mounts that are reading (an idle mount reads nothing)."""
    t, f, w = s.thresholds, s.pending_for, s.window
    reading = "and ai_storage:juicefs_reads:rate > 1"
    return [
        *_levels(
            "JuiceFSReadThroughputLow",
            f"(ai_storage:juicefs_read_bytes:rate / 1e6 {reading})",
            "<",
            t.read_throughput_mb_s,
            f,
            "A JuiceFS mount reads below {level} MB/s",
        ),
        *_levels(
            "JuiceFSReadLatencyHigh",
            "ai_storage:juicefs_read_latency_seconds:mean * 1000",
            ">",
            t.read_latency_ms,
            f,
            "Mean JuiceFS read latency above {level} ms",
        ),
        *_levels(
            "JuiceFSCacheHitRatioLow",
            f"(ai_storage:juicefs_cache_hit_ratio * 100 {reading})",
            "<",
            t.cache_hit_ratio_percent,
            f,
            "The local cache serves less than {level} % of read bytes",
        ),
        *_levels(
            "JuiceFSCacheEvictionsHigh",
            "ai_storage:juicefs_cache_evictions:rate",
            ">",
            t.cache_evictions_per_second,
            f,
            "The local cache evicts more than {level} blocks per second",
        ),
        _alert(
            "JuiceFSCacheDiskFull",
            f"rate(juicefs_blockcache_drops[{w}]) > 0",
            "warning",
            f,
            "A JuiceFS client drops cache blocks: its cache disk is full",
        ),
        _alert(
            "JuiceFSObjectStoreErrors",
            f"rate(juicefs_object_request_errors[{w}]) > 0",
            "warning",
            "5m",
            "Object store requests of a JuiceFS client fail",
        ),
    ]


def metadata_alerts(s: RuleSettings, replicas: int | None) -> list[dict[str, Any]]:
    """The metadata engine: down, memory, persistence, replication and failover (``replicas`` with Sentinel)."""
    t = s.thresholds.metadata_memory_percent
    persistence = "redis_aof_last_write_status == 0 or redis_aof_last_bgrewrite_status == 0"
    rules = [
        _alert("RedisDown", "redis_up == 0", "critical", "1m", "A Redis of the metadata engine does not answer"),
        *_levels(
            "RedisMemoryNearLimit",
            "(redis_memory_used_bytes / redis_memory_max_bytes * 100 and redis_memory_max_bytes > 0)",
            ">",
            t,
            "5m",
            "Redis uses more than {level} % of maxmemory (noeviction: JuiceFS writes fail at 100 %)",
        ),
        _alert(
            "RedisPersistenceFailing",
            f"{persistence} or redis_rdb_last_bgsave_status == 0 or redis_aof_enabled == 0",
            "critical",
            "1m",
            "A Redis data node cannot persist: its AOF or snapshot fails, or AOF is off",
        ),
        _alert("RedisReplicaLinkDown", "redis_master_link_up == 0", "warning", "2m", "A replica lost its primary"),
    ]
    if replicas:
        rules += [
            _alert(
                "RedisReplicasMissing",
                f"redis_sentinel_master_ok_slaves < {replicas}",
                "warning",
                "5m",
                f"Fewer than {replicas} healthy replicas can take over the primary",
            ),
            _alert(
                "RedisSentinelFailover",
                "count by (master_name, instance) (last_over_time(redis_sentinel_master_status[15m])) > 1",
                "warning",
                "0s",
                "The Sentinels promoted a replica in the last 15 minutes",
            ),
            _alert(
                "RedisSentinelQuorumLost",
                "redis_sentinel_master_ckquorum_status == 0",
                "critical",
                "1m",
                "The Sentinels cannot reach quorum: a failover cannot happen",
            ),
        ]
    return rules


def platform_alerts(s: RuleSettings, ceph: bool, volcano: bool) -> list[dict[str, Any]]:
    """Ceph health (with Rook-Ceph) and gang-scheduled jobs waiting too long (with Volcano)."""
    rules = []
    if ceph:
        rules += [
            _alert("CephHealthWarning", "ceph_health_status == 1", "warning", "15m", "Ceph reports HEALTH_WARN"),
            _alert("CephHealthError", "ceph_health_status == 2", "critical", "5m", "Ceph reports HEALTH_ERR"),
        ]
    if volcano:
        rules.append(
            _alert(
                "VolcanoGangJobsPending",
                "volcano_queue_pod_group_pending_count > 0",
                "warning",
                s.gang_pending_for,
                f"Gang-scheduled jobs wait in a Volcano queue for more than {s.gang_pending_for}",
            )
        )
    return rules


def rule_groups(s: RuleSettings, replicas: int | None, ceph: bool, volcano: bool) -> list[dict[str, Any]]:
    """Every rule group of the platform (the ``spec.groups`` of its PrometheusRule)."""
    groups: list[dict[str, Any]] = [
        {"name": "ai-storage-data-path", "rules": [*recording_rules(s.window), *data_path_alerts(s)]},
        {"name": "ai-storage-metadata", "rules": metadata_alerts(s, replicas)},
    ]
    others = platform_alerts(s, ceph, volcano)
    if others:
        groups.append({"name": "ai-storage-platform", "rules": others})
    for group in groups:
        _with_runbook(group["rules"], s.runbook_url)
    return groups
