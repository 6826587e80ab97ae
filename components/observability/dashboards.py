"""Grafana dashboards of the platform, as the JSON the Grafana sidecar loads from labelled ConfigMaps.

Per tier throughput (cold: the JuiceFS clients; warm, checkpoint and block: their Ceph pools; hot: TopoLVM
exports capacity, not I/O; every tier as the training jobs read it, by their data-tier label), the cache hit
ratio and evictions, metadata latency and errors (the JuiceFS clients' metadata operations, and Redis), object
store requests (the JuiceFS clients, every backend), the training jobs as the training library sees them (with
their asynchronous checkpoints), the data protection CronJobs and the restore tests, and whether each job's GPU is
fed (a row per training pod).
"""

from __future__ import annotations

import json
from typing import Any

from .protection_alerts import STALE_AFTER_RUNS
from .training_alerts import TIER

UID_PREFIX = "ai-storage-"
REQUESTS = "juicefs_object_request_durations_histogram_seconds_count"


def panel(title: str, targets: dict[str, str], unit: str, x: int, y: int) -> dict[str, Any]:
    """A 12x8 time-series panel of ``targets`` (legend -> PromQL)."""
    return {
        "type": "timeseries",
        "title": title,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": expr, "legendFormat": legend}
            for i, (legend, expr) in enumerate(targets.items())
        ],
    }


def row(title: str, y: int) -> dict[str, Any]:
    """A full-width row header at ``y``."""
    return {"type": "row", "title": title, "collapsed": False, "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}}


def dashboard(uid: str, title: str, panels: list[dict[str, Any]]) -> dict[str, Any]:
    """A dashboard with a Prometheus data source variable."""
    source = {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Data source"}
    return {
        "uid": f"{UID_PREFIX}{uid}",
        "title": title,
        "tags": ["ai-storage-platform"],
        "schemaVersion": 39,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [source]},
        "panels": panels,
    }


def ceph_pool(metric: str) -> str:
    """Per Ceph pool rate of ``metric``, named by pool (the warm and checkpoint filesystems' and the block pool)."""
    return f"sum by (name) (rate({metric}[5m]) * on (pool_id) group_left (name) ceph_pool_metadata)"


def data_path(window: str) -> dict[str, Any]:
    """Throughput per tier and the cold tier's cache."""
    w = window
    return dashboard(
        "data-path",
        "AI storage / data path",
        [
            panel(
                "Cold tier (JuiceFS) throughput",
                {
                    "read {{mp}}": "ai_storage:juicefs_read_bytes:rate",
                    "write {{mp}}": f"rate(juicefs_fuse_written_size_bytes_sum[{w}])",
                },
                "Bps",
                0,
                0,
            ),
            panel(
                "Warm, checkpoint and block tiers (Ceph pools) throughput",
                {"read {{name}}": ceph_pool("ceph_pool_rd_bytes"), "write {{name}}": ceph_pool("ceph_pool_wr_bytes")},
                "Bps",
                12,
                0,
            ),
            panel("Cold tier cache hit ratio", {"{{mp}}": "ai_storage:juicefs_cache_hit_ratio"}, "percentunit", 0, 8),
            panel(
                "Cold tier cache evictions and dropped blocks",
                {
                    "evicted {{mp}}": "ai_storage:juicefs_cache_evictions:rate",
                    "dropped {{mp}}": f"rate(juicefs_blockcache_drops[{w}])",
                },
                "ops",
                12,
                8,
            ),
            panel("Cold tier read latency", {"{{mp}}": "ai_storage:juicefs_read_latency_seconds:mean"}, "s", 0, 16),
            panel(
                "Training reads by tier (throughput, the jobs' view)",
                {"{{ai_storage_platform_data_tier}}": f"sum by ({TIER}) (ai_storage:read_bytes:rate)"},
                "Bps",
                0,
                24,
            ),
            panel(
                "Training reads by tier (mean latency, slowest pod)",
                {"{{ai_storage_platform_data_tier}}": f"max by ({TIER}) (ai_storage:read_latency_seconds:mean)"},
                "s",
                12,
                24,
            ),
            panel(
                "Hot tier (TopoLVM) free capacity",
                {"{{node}} {{device_class}}": "topolvm_volumegroup_available_bytes"},
                "bytes",
                12,
                16,
            ),
        ],
    )


def metadata_and_objects(window: str, redis: bool = True) -> dict[str, Any]:
    """Metadata latency and errors, and object store requests; the Redis panels only with ``redis`` (an in-cluster
    engine with redis_exporter: ElastiCache's figures are in CloudWatch, and its alarms page)."""
    w = window
    p99 = f"histogram_quantile(0.99, sum by (le, mp) (rate(juicefs_meta_ops_durations_histogram_seconds_bucket[{w}])))"
    panels = [panel("Metadata operation latency (p99, JuiceFS clients)", {"{{mp}}": p99}, "s", 0, 0)]
    if redis:
        commands = {
            "commands {{pod}}": f"rate(redis_commands_processed_total[{w}])",
            "errors {{pod}} {{err}}": f"rate(redis_errors_total[{w}])",
        }
        memory = {"{{pod}}": "redis_memory_used_bytes / redis_memory_max_bytes"}
        panels += [
            panel("Redis commands and errors", commands, "ops", 12, 0),
            panel("Redis memory of maxmemory", memory, "percentunit", 0, 8),
            panel("Redis replicas connected to the primary", {"{{pod}}": "redis_connected_slaves"}, "short", 12, 8),
        ]
    y = 16 if redis else 8
    requests = {
        "{{method}}": f"sum by (method) (rate({REQUESTS}[{w}]))",
        "errors": f"sum (rate(juicefs_object_request_errors[{w}]))",
    }
    data = {"{{method}}": f"sum by (method) (rate(juicefs_object_request_data_bytes[{w}]))"}
    panels += [
        panel("Object store requests (JuiceFS clients)", requests, "reqps", 0, y),
        panel("Object store bytes (JuiceFS clients)", data, "Bps", 12, y),
    ]
    return dashboard("metadata-objects", "AI storage / metadata and object store", panels)


def training_and_protection(window: str, checkpoint_window: str) -> dict[str, Any]:
    """Training pods (prefetch, reads, checkpoints), the data protection CronJobs, and the checkpoints."""
    w = window
    pod = "{{namespace}}/{{pod}}"
    cronjob = "{{namespace}}/{{cronjob}}"
    p99 = f"histogram_quantile(0.99, sum by (le, namespace, pod) (rate(ai_storage_read_seconds_bucket[{w}])))"
    return dashboard(
        "training-protection",
        "AI storage / training jobs and data protection",
        [
            row("Training jobs (the training library's metrics, per pod)", 0),
            panel("Prefetch hit ratio", {pod: "ai_storage:prefetch_hit_ratio"}, "percentunit", 0, 1),
            panel("Read throughput", {pod: f"rate(ai_storage_read_bytes_total[{w}])"}, "Bps", 12, 1),
            panel("Read latency (p99)", {pod: p99}, "s", 0, 9),
            panel(
                "Checkpoint save and restore time (mean)",
                {
                    f"save {pod}": "ai_storage:checkpoint_save_seconds:mean",
                    f"restore {pod}": "ai_storage:checkpoint_restore_seconds:mean",
                },
                "s",
                12,
                9,
            ),
            panel("Checkpoint save failures", {pod: "ai_storage:checkpoint_save_failure_ratio"}, "percentunit", 0, 17),
            row("Data protection (metadata backup, checkpoint snapshots and offsite copies)", 25),
            panel(
                "Age of the last success, of the allowed age (stale above 100 %)",
                {
                    cronjob: "(time() - ai_storage:cronjob_last_success_time)"
                    f" / ({STALE_AFTER_RUNS} * ai_storage:cronjob_interval_seconds)"
                },
                "percentunit",
                0,
                26,
            ),
            panel(
                "A failed run newer than the last success (1: yes, 0: no)",
                {cronjob: "ai_storage:cronjob_last_failure_time > bool ai_storage:cronjob_last_success_time"},
                "short",
                12,
                26,
            ),
            *checkpoint_panels(checkpoint_window, 34),
        ],
    )


def checkpoint_panels(window: str, y: int) -> list[dict[str, Any]]:
    """Asynchronous checkpoints per training pod (lag, blocked time, saves in flight, promotion, validation) and
    the age of each claim's last successful restore test; rates over ``window`` (saves are minutes apart)."""
    pod, w = "{{namespace}}/{{pod}}", window

    def mean(histogram: str) -> str:
        return f"rate({histogram}_sum[{w}]) / rate({histogram}_count[{w}])"

    return [
        row("Checkpoints (asynchronous saves, landing and promotion, restore tests)", y),
        panel("Checkpoint lag (not yet durable)", {pod: "ai_storage_checkpoint_lag_seconds"}, "s", 0, y + 1),
        panel(
            "Checkpoint lag in steps, and saves in flight",
            {f"steps {pod}": "ai_storage_checkpoint_lag_steps", f"in flight {pod}": "ai_storage_checkpoint_in_flight"},
            "short",
            12,
            y + 1,
        ),
        panel(
            "Time the training loop blocked per save (mean)",
            {pod: mean("ai_storage_checkpoint_blocked_seconds")},
            "s",
            0,
            y + 9,
        ),
        panel(
            "Promotion to the checkpoint claim: time (mean) and failures",
            {
                f"seconds {pod}": mean("ai_storage_checkpoint_promotion_seconds"),
                f"failures {pod}": f"increase(ai_storage_checkpoint_promotion_failures_total[{w}])",
            },
            "short",
            12,
            y + 9,
        ),
        panel(
            "Checkpoints refused by validation",
            {pod: f"increase(ai_storage_checkpoint_validation_failures_total[{w}])"},
            "short",
            0,
            y + 17,
        ),
        panel(
            "Age of the last successful restore test",
            {"{{namespace}}/{{cronjob}}{{pod}}": "time() - ai_storage:checkpoint_restore_test_last_success_time"},
            "s",
            12,
            y + 17,
        ),
    ]


POD_VARIABLE: dict[str, Any] = {
    "name": "pod",
    "type": "query",
    "datasource": {"type": "prometheus", "uid": "${datasource}"},
    "query": "label_values(ai_storage_steps_total, pod)",
    "multi": True,
    "includeAll": True,
    "refresh": 2,
}
"""The dashboard variable of the training pods that run the step timer (one row each)."""


def gpu_fed(window: str) -> dict[str, Any]:
    """Is each job's GPU fed: a row per training pod (Grafana repeats it for each pod the ``pod`` variable picks):
    its step time stacked by cause, GPU busy, its loader's split and storage goodput, the reads of the tier it
    reads (throughput, latency) and its prefetch hit ratio beside the JuiceFS cache hit ratio."""
    w, sel = window, '{pod=~"$pod"}'
    steps = f"rate(ai_storage_steps_total{sel}[{w}])"
    wait, ckpt = (
        f"rate(ai_storage_step_data_wait_seconds_total{sel}[{w}])",
        f"rate(ai_storage_step_checkpoint_seconds_total{sel}[{w}])",
    )
    stacked = panel(
        "Step time by cause (s per step)",
        {
            "data wait": f"{wait} / {steps}",
            "checkpoint": f"{ckpt} / {steps}",
            "compute": f"(rate(ai_storage_step_seconds_total{sel}[{w}]) - {wait} - {ckpt}) / {steps}",
        },
        "s",
        0,
        1,
    )
    stacked["fieldConfig"]["defaults"]["custom"] = {"stacking": {"mode": "normal"}, "fillOpacity": 60}
    tier = f"{{{{{TIER}}}}} tier"
    board = dashboard(
        "gpu-fed",
        "AI storage / is the GPU fed (per training pod)",
        [
            {**row("$pod", 0), "repeat": "pod"},
            stacked,
            panel(
                "GPU busy, loader transform share, storage goodput, data wait on CPU",
                {
                    "GPU busy": f"ai_storage:gpu_utilization:ratio{sel}",
                    "loader transforming": f"ai_storage:loader_transform:ratio{sel}",
                    "storage goodput": f"ai_storage:storage_goodput:ratio{sel}",
                    "data wait on CPU": f"ai_storage:data_wait_on_cpu:ratio{sel}",
                },
                "percentunit",
                12,
                1,
            ),
            panel("Read throughput", {tier: f"ai_storage:read_bytes:rate{sel}"}, "Bps", 0, 9),
            panel("Read latency (mean)", {tier: f"ai_storage:read_latency_seconds:mean{sel}"}, "s", 12, 9),
            panel(
                "Prefetch hit ratio, and the JuiceFS cache hit ratio per mount (cold tier)",
                {
                    "prefetch": f"ai_storage:prefetch_hit_ratio{sel}",
                    "cache {{mp}}": "ai_storage:juicefs_cache_hit_ratio",
                },
                "percentunit",
                0,
                17,
            ),
        ],
    )
    board["templating"]["list"].append(POD_VARIABLE)
    return board


def dashboards(window: str, checkpoint_window: str = "1h", redis: bool = True) -> dict[str, str]:
    """Every dashboard as ``<file name>: <JSON text>`` (the data of its ConfigMap); checkpoint figures over
    ``checkpoint_window``; Redis panels only with ``redis`` (an in-cluster metadata engine)."""
    metadata = metadata_and_objects(window, redis)
    boards = [data_path(window), metadata, training_and_protection(window, checkpoint_window)]
    boards.append(gpu_fed(window))
    return {f"{b['uid']}.json": json.dumps(b, indent=1, sort_keys=True) for b in boards}
