"""Alert rules of the platform (Prometheus rule groups), from metrics real exporters emit.

The data path is watched from the JuiceFS clients (the CSI mount pods, `juicefs mount --metrics`): read
throughput and latency, cache hit ratio and evictions, cache blocks dropped because the cache disk is full,
object store request errors. The metadata engine from redis_exporter beside every Redis and Sentinel: down,
memory near its limit, persistence failing, a replica's link down, replicas missing, a failover, the Sentinels'
quorum lost. Ceph from the Rook mgr module (`ceph_health_status`), gang scheduling from the Volcano scheduler
(`volcano_queue_pod_group_pending_count`). Training jobs from the training library's own metrics (prefetch hit
ratio, checkpoint save and restore time, save failures). The data protection (metadata backup, checkpoint
snapshots, offsite copies) from kube-state-metrics' CronJob and Job series. Thresholds come from settings (the
design reference's table). Each alert carries a ``runbook_url`` annotation to its section of docs/alerts.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .checkpoints import OFFSITE_SUFFIX, SNAPSHOTS_SUFFIX
from .metadata_backup import BACKUP_CRONJOB
from .sections import Problem, Section, Window

DURATION = r"^[0-9]+(ms|s|m|h)$"
STALE_AFTER_RUNS = 2
"""A protection CronJob is stale when its last success is older than this many of its schedule's intervals."""
PROTECTION = {
    "MetadataBackup": (BACKUP_CRONJOB, "The JuiceFS metadata backup"),
    "CheckpointSnapshots": (f".+{SNAPSHOTS_SUFFIX}", "A checkpoint snapshot CronJob"),
    "CheckpointOffsite": (f".+{OFFSITE_SUFFIX}", "A checkpoint offsite copy CronJob"),
}
"""The data protection CronJobs by alert name prefix: the pattern of their names (the platform's and every
team's, in any namespace) and what they are."""


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

    def problems(self) -> list[Problem]:
        """A critical level is worse than the warning level."""
        below = ("read_throughput_mb_s", "cache_hit_ratio_percent", "prefetch_hit_ratio_percent")
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


def training_recording_rules(window: str, checkpoint_window: str) -> list[dict[str, Any]]:
    """Per training pod figures of the training library's metrics: the prefetch hit ratio over ``window``, the
    checkpoint figures over ``checkpoint_window`` (saves are minutes apart)."""
    w, cw = window, checkpoint_window
    hits, misses = "ai_storage_prefetch_hits_total", "ai_storage_prefetch_misses_total"
    saves, failures = "ai_storage_checkpoint_save_seconds_count", "ai_storage_checkpoint_save_failures_total"
    return [
        {
            "record": "ai_storage:prefetch_hit_ratio",
            "expr": f"rate({hits}[{w}]) / (rate({hits}[{w}]) + rate({misses}[{w}]))",
        },
        *(
            {
                "record": f"ai_storage:checkpoint_{what}_seconds:mean",
                "expr": f"rate(ai_storage_checkpoint_{what}_seconds_sum[{cw}])"
                f" / rate(ai_storage_checkpoint_{what}_seconds_count[{cw}])",
            }
            for what in ("save", "restore")
        ),
        {
            "record": "ai_storage:checkpoint_save_failure_ratio",
            "expr": f"rate({failures}[{cw}]) / (rate({failures}[{cw}]) + rate({saves}[{cw}]))",
        },
    ]


def training_alerts(s: RuleSettings) -> list[dict[str, Any]]:
    """The design reference's training rows, per training pod (a ratio with no reads or saves has no value)."""
    t, f = s.thresholds, s.pending_for
    return [
        *_levels(
            "TrainingPrefetchHitRatioLow",
            "ai_storage:prefetch_hit_ratio * 100",
            "<",
            t.prefetch_hit_ratio_percent,
            f,
            "Less than {level} % of a training job's reads find their prefetched data ready",
        ),
        *_levels(
            "CheckpointSaveSlow",
            "ai_storage:checkpoint_save_seconds:mean",
            ">",
            t.checkpoint_save_seconds,
            f,
            "A training job's checkpoint saves take more than {level} s",
        ),
        *_levels(
            "CheckpointRestoreSlow",
            "ai_storage:checkpoint_restore_seconds:mean",
            ">",
            t.checkpoint_restore_seconds,
            f,
            "A training job's checkpoint restores take more than {level} s",
        ),
        *_levels(
            "CheckpointSaveFailures",
            "ai_storage:checkpoint_save_failure_ratio * 100",
            ">",
            t.checkpoint_save_failure_percent,
            f,
            "More than {level} % of a training job's checkpoint saves fail",
        ),
    ]


def protection_recording_rules() -> list[dict[str, Any]]:
    """Per protection CronJob (kube-state-metrics): the time of its last success (its creation while it has none),
    its schedule's interval (kube-state-metrics' next run, computed from the schedule, minus the last), and the
    start of its newest failed run."""
    names = "|".join(pattern for pattern, _ in PROTECTION.values())
    cronjob = f'{{cronjob=~"{names}"}}'
    created = f"kube_cronjob_created{cronjob}"
    owner = f'kube_job_owner{{owner_kind="CronJob",owner_name=~"{names}"}}'
    failed_start = (
        '(kube_job_status_start_time and on (namespace, job_name) (kube_job_failed{condition="true"} == 1))'
        f" * on (namespace, job_name) group_left (owner_name) {owner}"
    )
    return [
        {
            "record": "ai_storage:cronjob_last_success_time",
            "expr": f"max by (namespace, cronjob) (kube_cronjob_status_last_successful_time{cronjob} or {created})",
        },
        {
            "record": "ai_storage:cronjob_interval_seconds",
            "expr": f"max by (namespace, cronjob) (kube_cronjob_next_schedule_time{cronjob}"
            f" - (kube_cronjob_status_last_schedule_time{cronjob} or {created}))",
        },
        {
            "record": "ai_storage:cronjob_last_failure_time",
            "expr": "max by (namespace, cronjob)"
            f' (label_replace({failed_start}, "cronjob", "$1", "owner_name", "(.+)"))',
        },
    ]


def protection_alerts() -> list[dict[str, Any]]:
    """Each protection CronJob: stale when its last success is older than ``STALE_AFTER_RUNS`` intervals of its
    schedule, failed when its newest failed run started after its last success."""
    rules = []
    for prefix, (pattern, what) in PROTECTION.items():
        cronjob = f'{{cronjob=~"{pattern}"}}'
        rules += [
            _alert(
                f"{prefix}Stale",
                f"time() - ai_storage:cronjob_last_success_time{cronjob}"
                f" > {STALE_AFTER_RUNS} * ai_storage:cronjob_interval_seconds{cronjob}",
                "critical",
                "5m",
                f"{what} has not succeeded for {STALE_AFTER_RUNS} of its scheduled intervals",
            ),
            _alert(
                f"{prefix}Failed",
                f"ai_storage:cronjob_last_failure_time{cronjob} > ai_storage:cronjob_last_success_time{cronjob}",
                "warning",
                "1m",
                f"{what} failed its last run",
            ),
        ]
    return rules


def rule_groups(s: RuleSettings, replicas: int | None, ceph: bool, volcano: bool) -> list[dict[str, Any]]:
    """Every rule group of the platform (the ``spec.groups`` of its PrometheusRule)."""
    groups: list[dict[str, Any]] = [
        {"name": "ai-storage-data-path", "rules": [*recording_rules(s.window), *data_path_alerts(s)]},
        {"name": "ai-storage-metadata", "rules": metadata_alerts(s, replicas)},
        {
            "name": "ai-storage-training",
            "rules": [*training_recording_rules(s.window, s.checkpoint_window), *training_alerts(s)],
        },
        {"name": "ai-storage-protection", "rules": [*protection_recording_rules(), *protection_alerts()]},
    ]
    others = platform_alerts(s, ceph, volcano)
    if others:
        groups.append({"name": "ai-storage-platform", "rules": others})
    for group in groups:
        _with_runbook(group["rules"], s.runbook_url)
    return groups
