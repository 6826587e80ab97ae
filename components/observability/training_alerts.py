"""Alert rules of the training jobs, from the training library's own metrics (``ai_storage_training.metrics``,
per training pod): read throughput and latency on every tier (labelled with the tier the pod reads), prefetch hit
ratio, checkpoint save and restore time, save failures, and checkpoint lag: the time since the newest requested
checkpoint that is not yet durable, measured in checkpoint intervals.
"""

from __future__ import annotations

from typing import Any

from .alert_settings import RuleSettings, alert, levels, seconds

TIER = "ai_storage_platform_data_tier"
"""The training pods' data-tier label as their metrics carry it (the PodMonitor's ``podTargetLabels``)."""


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
        *step_recording_rules(w, cw),
        # The training pods' own reads, labelled with the tier they read (TIER, from the pod's data-tier label).
        {"record": "ai_storage:read_bytes:rate", "expr": f"rate(ai_storage_read_bytes_total[{w}])"},
        {"record": "ai_storage:reads:rate", "expr": f"rate(ai_storage_read_seconds_count[{w}])"},
        {
            "record": "ai_storage:read_latency_seconds:mean",
            "expr": f"rate(ai_storage_read_seconds_sum[{w}]) / rate(ai_storage_read_seconds_count[{w}])",
        },
    ]


CHECKPOINT_BLOCKED, RESTORED = "ai_storage_step_checkpoint_seconds_total", "ai_storage_checkpoint_restore_seconds_sum"
LOST_PROGRESS = "ai_storage_lost_progress_seconds_total"


def _read_share(window: str) -> str:
    """The share of a pod's loader time spent on storage reads (absent without the loader's split, or its time)."""
    read = f"rate(ai_storage_read_seconds_sum[{window}])"
    return f"{read} / ({read} + rate(ai_storage_loader_transform_seconds_total[{window}]) > 0)"


def step_recording_rules(window: str, checkpoint_window: str) -> list[dict[str, Any]]:
    """Per training pod: where its steps' time goes (the step timer, ``ai_storage_training.steps``), the share of
    its loader's time spent transforming, its GPUs' utilisation (DCGM's, joined on the pod; else the library's own
    NVML gauge), its storage goodput over ``checkpoint_window`` (the data wait counted at the loader's read share:
    a loader waiting on its CPU is not storage's loss) and, beside it, the share of its steps waiting on that CPU."""
    w, cw = window, checkpoint_window
    step = f"rate(ai_storage_step_seconds_total[{w}])"
    wait, ckpt = (
        f"rate(ai_storage_step_data_wait_seconds_total[{w}])",
        f"rate(ai_storage_step_checkpoint_seconds_total[{w}])",
    )
    transform, read = f"rate(ai_storage_loader_transform_seconds_total[{w}])", f"rate(ai_storage_read_seconds_sum[{w}])"
    waited = f"rate(ai_storage_step_data_wait_seconds_total[{cw}])"
    lost = " + ".join(
        [f"({waited} * ({_read_share(cw)}) or {waited})"]  # storage's part of the data wait: its read share
        + [f"rate({name}[{cw}])" for name in (CHECKPOINT_BLOCKED, RESTORED, LOST_PROGRESS)]
    )
    wall = " + ".join(f"rate({name}[{cw}])" for name in ("ai_storage_step_seconds_total", RESTORED, LOST_PROGRESS))
    return [
        {"record": "ai_storage:step_data_wait:ratio", "expr": f"{wait} / {step}"},
        {"record": "ai_storage:step_checkpoint:ratio", "expr": f"{ckpt} / {step}"},
        {"record": "ai_storage:step_compute:ratio", "expr": f"1 - ({wait} + {ckpt}) / {step}"},
        {"record": "ai_storage:loader_transform:ratio", "expr": f"{transform} / ({transform} + {read})"},
        {
            "record": "ai_storage:gpu_utilization:ratio",
            "expr": "avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL) / 100"
            " or max by (namespace, pod) (ai_storage_gpu_utilization_ratio)",
        },
        {"record": "ai_storage:storage_goodput:ratio", "expr": f"1 - ({lost}) / ({wall})"},
        {"record": "ai_storage:data_wait_on_cpu:ratio", "expr": f"{wait} * (1 - ({_read_share(w)})) / {step}"},
    ]


def input_alerts(s: RuleSettings) -> list[dict[str, Any]]:
    """The design's procedure as alerts: a job whose GPUs are busy less than ``gpu_busy_percent`` while it waits
    for data longer than it computes is input-bound; its loader's time split says storage (reads) or CPU
    (transforms). Annotated with the tier the job reads and its prefetch hit ratio."""
    busy = f"{s.gpu_busy_percent:g}"
    starved = (
        "(ai_storage:step_data_wait:ratio > ai_storage:step_compute:ratio)"
        f" and on (namespace, pod) (ai_storage:gpu_utilization:ratio * 100 < {busy})"
    )
    cpu = "on (namespace, pod) (ai_storage:loader_transform:ratio > 0.5)"
    hit_ratio = (
        "{{ with printf `ai_storage:prefetch_hit_ratio{namespace='%s',pod='%s'}` $labels.namespace $labels.pod"
        " | query }}{{ . | first | value | humanizePercentage }}{{ else }}unknown{{ end }}"
    )
    tier = f"the {{{{ $labels.{TIER} }}}} tier"
    storage = alert(
        "TrainingInputBound",
        f"{starved} unless {cpu}",
        "warning",
        s.pending_for,
        f"A training job's GPUs are busy less than {busy} % while it waits longer for data from {tier} than it "
        f"computes (prefetch hit ratio {hit_ratio})",
    )
    loader = alert(
        "TrainingLoaderCPUBound",
        f"{starved} and {cpu}",
        "warning",
        s.pending_for,
        f"A training job's GPUs are busy less than {busy} % while its data loader spends most of its time "
        "transforming samples: more loader workers or lighter transforms",
    )
    return [storage, loader]


def read_alerts(s: RuleSettings) -> list[dict[str, Any]]:
    """Every tier's reads as the training jobs see them (hot and warm have no client metrics of their own), on
    pods that are reading: the design's training-data read throughput and latency rows, labelled with the tier."""
    t, f = s.thresholds, s.pending_for
    tier = f"the {{{{ $labels.{TIER} }}}} tier"  # the alert's summary names the tier the pod reads
    return [
        *levels(
            "TierReadThroughputLow",
            "(ai_storage:read_bytes:rate / 1e6 and ai_storage:reads:rate > 1)",
            t.read_throughput_mb_s,
            f,
            f"A training job reads {tier} below {{level}} MB/s",
        ),
        *levels(
            "TierReadLatencyHigh",
            "(ai_storage:read_latency_seconds:mean * 1000 and ai_storage:reads:rate > 1)",
            t.read_latency_ms,
            f,
            f"A training job's mean read latency on {tier} is above {{level}} ms",
        ),
    ]


def training_alerts(s: RuleSettings, checkpoint_interval: str) -> list[dict[str, Any]]:
    """The design reference's training rows, per training pod (a ratio with no reads or saves has no value); the lag
    in units of ``checkpoint_interval`` (how often the jobs save: the checkpoint tier's decision record)."""
    t, f = s.thresholds, s.pending_for
    return [
        *read_alerts(s),
        *input_alerts(s),
        *levels(
            "StorageGoodputLow",
            "ai_storage:storage_goodput:ratio * 100",
            t.storage_goodput_percent,
            f,
            "Less than {level} % of a training job's time is free of storage waits (data, checkpoints, restore, "
            "progress lost at a restart)",
        ),
        *levels(
            "TrainingPrefetchHitRatioLow",
            "ai_storage:prefetch_hit_ratio * 100",
            t.prefetch_hit_ratio_percent,
            f,
            "Less than {level} % of a training job's reads find their prefetched data ready",
        ),
        *levels(
            "CheckpointSaveSlow",
            "ai_storage:checkpoint_save_seconds:mean",
            t.checkpoint_save_seconds,
            f,
            "A training job's checkpoint saves take more than {level} s",
        ),
        *levels(
            "CheckpointRestoreSlow",
            "ai_storage:checkpoint_restore_seconds:mean",
            t.checkpoint_restore_seconds,
            f,
            "A training job's checkpoint restores take more than {level} s",
        ),
        *levels(
            "CheckpointSaveFailures",
            "ai_storage:checkpoint_save_failure_ratio * 100",
            t.checkpoint_save_failure_percent,
            f,
            "More than {level} % of a training job's checkpoint saves fail",
        ),
        # The lag is itself a duration (it only grows until the checkpoint is durable): no extra wait.
        *levels(
            "CheckpointLagHigh",
            f"ai_storage_checkpoint_lag_seconds / {seconds(checkpoint_interval):g}",
            t.checkpoint_lag_intervals,
            "0s",
            "A training job's newest checkpoint has not been durable for more than {level} checkpoint intervals"
            f" ({checkpoint_interval} each)",
        ),
    ]
