"""Alert rules of the platform (Prometheus rule groups), from metrics real exporters emit; the training and
protection rules in ``training_alerts`` and ``protection_alerts``, the settings in ``alert_settings``.

The data path is watched from the JuiceFS clients (the CSI mount pods, `juicefs mount --metrics`): read
throughput and latency, cache hit ratio and evictions, cache blocks dropped because the cache disk is full,
object store request errors. The metadata engine from redis_exporter beside every Redis and Sentinel: down,
memory near its limit, persistence failing, a replica's link down, replicas missing, a failover, the Sentinels'
quorum lost. Ceph from the Rook mgr module (`ceph_health_status`), gang scheduling from the Volcano scheduler
(`volcano_queue_pod_group_pending_count`). Training jobs from the training library's own metrics (prefetch hit
ratio, checkpoint save and restore time, save failures, checkpoint lag). The data protection (metadata backup,
checkpoint snapshots, offsite copies, restore tests) from kube-state-metrics' CronJob and Job series. Thresholds
come from settings (the design reference's table). Each alert carries a ``runbook_url`` annotation to its section
of docs/alerts.md.
"""

from __future__ import annotations

from typing import Any

from ..tiers.decision_records import DEFAULTS as TIER_DECISIONS
from .alert_settings import (
    DURATION,
    AlertThresholds,
    PercentThreshold,
    RuleSettings,
    Threshold,
    alert,
    levels,
    with_runbook,
)
from .protection_alerts import (
    PROTECTION,
    STALE_AFTER_RUNS,
    protection_alerts,
    protection_recording_rules,
    restore_test_rules,
)
from .training_alerts import training_alerts, training_recording_rules

__all__ = [
    "DURATION",
    "PROTECTION",
    "STALE_AFTER_RUNS",
    "AlertThresholds",
    "PercentThreshold",
    "RuleSettings",
    "Threshold",
    "rule_groups",
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
        *levels(
            "JuiceFSReadThroughputLow",
            f"(ai_storage:juicefs_read_bytes:rate / 1e6 {reading})",
            t.read_throughput_mb_s,
            f,
            "A JuiceFS mount reads below {level} MB/s",
        ),
        *levels(
            "JuiceFSReadLatencyHigh",
            "ai_storage:juicefs_read_latency_seconds:mean * 1000",
            t.read_latency_ms,
            f,
            "Mean JuiceFS read latency above {level} ms",
        ),
        *levels(
            "JuiceFSCacheHitRatioLow",
            f"(ai_storage:juicefs_cache_hit_ratio * 100 {reading})",
            t.cache_hit_ratio_percent,
            f,
            "The local cache serves less than {level} % of read bytes",
        ),
        *levels(
            "JuiceFSCacheEvictionsHigh",
            "ai_storage:juicefs_cache_evictions:rate",
            t.cache_evictions_per_second,
            f,
            "The local cache evicts more than {level} blocks per second",
        ),
        alert(
            "JuiceFSCacheDiskFull",
            f"rate(juicefs_blockcache_drops[{w}]) > 0",
            "warning",
            f,
            "A JuiceFS client drops cache blocks: its cache disk is full",
        ),
        alert(
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
        alert("RedisDown", "redis_up == 0", "critical", "1m", "A Redis of the metadata engine does not answer"),
        *levels(
            "RedisMemoryNearLimit",
            "(redis_memory_used_bytes / redis_memory_max_bytes * 100 and redis_memory_max_bytes > 0)",
            t,
            "5m",
            "Redis uses more than {level} % of maxmemory (noeviction: JuiceFS writes fail at 100 %)",
        ),
        alert(
            "RedisPersistenceFailing",
            f"{persistence} or redis_rdb_last_bgsave_status == 0 or redis_aof_enabled == 0",
            "critical",
            "1m",
            "A Redis data node cannot persist: its AOF or snapshot fails, or AOF is off",
        ),
        alert("RedisReplicaLinkDown", "redis_master_link_up == 0", "warning", "2m", "A replica lost its primary"),
    ]
    if replicas:
        rules += [
            alert(
                "RedisReplicasMissing",
                f"redis_sentinel_master_ok_slaves < {replicas}",
                "warning",
                "5m",
                f"Fewer than {replicas} healthy replicas can take over the primary",
            ),
            alert(
                "RedisSentinelFailover",
                "count by (master_name, instance) (last_over_time(redis_sentinel_master_status[15m])) > 1",
                "warning",
                "0s",
                "The Sentinels promoted a replica in the last 15 minutes",
            ),
            alert(
                "RedisSentinelQuorumLost",
                "redis_sentinel_master_ckquorum_status == 0",
                "critical",
                "1m",
                "The Sentinels cannot reach quorum: a failover cannot happen",
            ),
        ]
    return rules


def platform_alerts(s: RuleSettings, ceph: bool, volcano: bool, acceptance: str | None = None) -> list[dict[str, Any]]:
    """Ceph health (with Rook-Ceph), gang-scheduled jobs waiting too long (with Volcano), and a storage acceptance
    Job that failed (its tier missed a threshold; with acceptance Jobs in namespace ``acceptance``)."""
    rules = []
    if acceptance:
        failed = f'kube_job_status_failed{{namespace="{acceptance}",job_name=~"acceptance-.+"}} > 0'
        summary = "A storage tier failed its acceptance Job (fio below its thresholds)"
        rules.append(alert("StorageAcceptanceFailed", failed, "warning", "0m", summary))
    if ceph:
        rules += [
            alert("CephHealthWarning", "ceph_health_status == 1", "warning", "15m", "Ceph reports HEALTH_WARN"),
            alert("CephHealthError", "ceph_health_status == 2", "critical", "5m", "Ceph reports HEALTH_ERR"),
        ]
    if volcano:
        rules.append(
            alert(
                "VolcanoGangJobsPending",
                "volcano_queue_pod_group_pending_count > 0",
                "warning",
                s.gang_pending_for,
                f"Gang-scheduled jobs wait in a Volcano queue for more than {s.gang_pending_for}",
            )
        )
    return rules


def rule_groups(
    s: RuleSettings,
    replicas: int | None,
    ceph: bool,
    volcano: bool,
    acceptance: str | None = None,
    checkpoint_interval: str | None = None,
    metadata: bool = True,
) -> list[dict[str, Any]]:
    """Every rule group of the platform (the ``spec.groups`` of its PrometheusRule); ``checkpoint_interval``: how
    often the jobs save, from the checkpoint tier's decision record, the one source of it (default: its default);
    ``metadata``: the metadata engine runs in the cluster with redis_exporter (ElastiCache is watched by CloudWatch)."""
    interval = checkpoint_interval or TIER_DECISIONS["checkpoint"].checkpoint_interval
    assert interval is not None  # TierDecisions.problems: the checkpoint record always says it
    groups: list[dict[str, Any]] = [
        {"name": "ai-storage-data-path", "rules": [*recording_rules(s.window), *data_path_alerts(s)]},
        {
            "name": "ai-storage-training",
            "rules": [*training_recording_rules(s.window, s.checkpoint_window), *training_alerts(s, interval)],
        },
        {
            "name": "ai-storage-protection",
            "rules": [*protection_recording_rules(), *protection_alerts(), *restore_test_rules(s)],
        },
    ]
    if metadata:
        groups.insert(1, {"name": "ai-storage-metadata", "rules": metadata_alerts(s, replicas)})
    others = platform_alerts(s, ceph, volcano, acceptance)
    if others:
        groups.append({"name": "ai-storage-platform", "rules": others})
    for group in groups:
        with_runbook(group["rules"], s.runbook_url)
    return groups
