"""The training metrics (the platform's alert rules and dashboards read these names) and their HTTP endpoint.

Every metric lives in prometheus_client's default registry, without labels of its own: Prometheus adds the
namespace and pod of the training pod it scrapes. With ``$PROMETHEUS_MULTIPROC_DIR`` set (an empty directory, before
the process starts) every process, DataLoader workers included, writes its values there and ``serve()`` reports
their sum (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import os
import threading
from typing import Final
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram, multiprocess, start_http_server

PORT_VARIABLE = "AI_STORAGE_METRICS_PORT"
DEFAULT_PORT = 9095
CHECKPOINT_BUCKETS = (0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 300, 600)
BLOCKED_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
LATEST: Final = "mostrecent"
"""How a gauge is reported in multiprocess mode: the value last set by any process, one series (not one per pid)."""
READ_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

SAVE_SECONDS = Histogram(
    "ai_storage_checkpoint_save_seconds", "Duration of each successful checkpoint save.", buckets=CHECKPOINT_BUCKETS
)
RESTORE_SECONDS = Histogram(
    "ai_storage_checkpoint_restore_seconds",
    "Duration of each successful checkpoint load (restore).",
    buckets=CHECKPOINT_BUCKETS,
)
SAVE_FAILURES = Counter("ai_storage_checkpoint_save_failures_total", "Checkpoint saves that raised.")
VALIDATION_FAILURES = Counter(
    "ai_storage_checkpoint_validation_failures_total", "Checkpoints refused by validation (size or CRC32C mismatch)."
)
LAG_SECONDS = Gauge(
    "ai_storage_checkpoint_lag_seconds",
    "Seconds since the oldest requested checkpoint newer than the newest durable one was requested (0: all durable).",
    multiprocess_mode=LATEST,
)
LAG_STEPS = Gauge(
    "ai_storage_checkpoint_lag_steps",
    "Newest requested checkpoint step minus newest durable step.",
    multiprocess_mode=LATEST,
)
BLOCKED_SECONDS = Histogram(
    "ai_storage_checkpoint_blocked_seconds",
    "Time the training loop blocked per save request (copy to host memory + wait for a free in-flight slot).",
    buckets=BLOCKED_BUCKETS,
)
IN_FLIGHT = Gauge(
    "ai_storage_checkpoint_in_flight", "Checkpoint saves accepted and not yet durable.", multiprocess_mode=LATEST
)
PROMOTION_SECONDS = Histogram(
    "ai_storage_checkpoint_promotion_seconds",
    "Duration of each promotion of a local checkpoint to the durable directory (copy, verify, commit).",
    buckets=CHECKPOINT_BUCKETS,
)
PROMOTION_FAILURES = Counter(
    "ai_storage_checkpoint_promotion_failures_total", "Promotions of a local checkpoint that failed."
)
RESTORE_TEST_TIMESTAMP = Gauge(
    "ai_storage_checkpoint_restore_test_timestamp_seconds",
    "Unix time of the last successful restore test.",
    multiprocess_mode=LATEST,
)
PREFETCH_HITS = Counter("ai_storage_prefetch_hits_total", "Reads whose prefetched data was ready when asked.")
PREFETCH_MISSES = Counter("ai_storage_prefetch_misses_total", "Reads the job had to wait for.")
READ_BYTES = Counter("ai_storage_read_bytes_total", "Bytes the prefetching reader returned to the job.")
SHARD_READS = Counter("ai_storage_read_shards_total", "Reads of whole packed shards (ShardDataset): a packed dataset.")
READ_SECONDS = Histogram("ai_storage_read_seconds", "Per-file read latency as the job sees it.", buckets=READ_BUCKETS)
TRANSFORM_SECONDS = Counter(
    "ai_storage_loader_transform_seconds_total",
    "Time the data loader spent decoding and transforming samples (ShardDataset's transform, steps.timed).",
)
SAMPLES = Counter("ai_storage_loader_samples_total", "Samples the data loader produced.")
STEPS = Counter("ai_storage_steps_total", "Training steps the step timer saw (steps.StepTimer).")
STEP_SECONDS = Counter("ai_storage_step_seconds_total", "Wall time of those steps, from one batch request to the next.")
DATA_WAIT_SECONDS = Counter(
    "ai_storage_step_data_wait_seconds_total", "Time the training loop waited for its next batch (host side)."
)
CHECKPOINT_WAIT_SECONDS = Counter(
    "ai_storage_step_checkpoint_seconds_total", "Time the training loop was blocked in checkpoint saves, within steps."
)
LOST_PROGRESS_SECONDS = Counter(
    "ai_storage_lost_progress_seconds_total",
    "Training time lost at a restart: steps past the checkpoint resumed from, times the step time they took.",
)
GOODPUT = Gauge(
    "ai_storage_storage_goodput_ratio",
    "Fraction of this run's time not lost to storage (data wait on reads, checkpoint blocking, restore, lost work).",
    multiprocess_mode=LATEST,
)
GPU_UTILIZATION = Gauge(
    "ai_storage_gpu_utilization_ratio", "The job's GPU busy fraction as NVML reports it.", multiprocess_mode=LATEST
)
GPU_MEMORY_USED = Gauge(
    "ai_storage_gpu_memory_used_bytes", "The job's GPU memory in use as NVML reports it.", multiprocess_mode=LATEST
)

_lock = threading.Lock()
_totals = {"blocked": 0.0, "restore": 0.0}


def observe_blocked(seconds: float) -> None:
    """A save request blocked the loop for ``seconds``: the histogram, and this process's total (steps.py)."""
    BLOCKED_SECONDS.observe(seconds)
    with _lock:
        _totals["blocked"] += seconds


def observe_restore(seconds: float) -> None:
    """A checkpoint load took ``seconds``: the histogram, and this process's total (storage goodput)."""
    RESTORE_SECONDS.observe(seconds)
    with _lock:
        _totals["restore"] += seconds


def process_total(what: str) -> float:
    """This process's seconds so far, ``blocked`` in saves or spent in ``restore``."""
    with _lock:
        return _totals[what]


def port_from_environment() -> int:
    """``$AI_STORAGE_METRICS_PORT``, or 9095."""
    value = os.environ.get(PORT_VARIABLE, "")
    if not value:
        return DEFAULT_PORT
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ValueError(f"{PORT_VARIABLE}: expected a TCP port (1-65535); got {value!r}")
    return int(value)


def serve(port: int | None = None, addr: str = "0.0.0.0") -> WSGIServer:
    """Serve the metrics over HTTP (``/metrics``) from a daemon thread, on ``port`` (default
    ``$AI_STORAGE_METRICS_PORT`` or 9095); return the server (``shutdown()`` stops it)."""
    server, _ = start_http_server(port_from_environment() if port is None else port, addr, registry=registry())
    return server


def registry() -> CollectorRegistry:
    """The registry the metrics are read from: every process's values (DataLoader workers too) with
    ``$PROMETHEUS_MULTIPROC_DIR``, else this process's."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    collected = CollectorRegistry()
    multiprocess.MultiProcessCollector(collected)
    return collected
