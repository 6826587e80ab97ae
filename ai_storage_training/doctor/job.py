"""``python -m ai_storage_training doctor job``: is a training job's GPU fed? A verdict from the job's metrics.

The figures come from the step timer (``steps.py``) and the data loader's read and transform times, read from the
job's metrics endpoint (``http://POD:9095/metrics``, or a saved scrape) or from Prometheus (``--prometheus URL``,
the job's pods chosen by ``--selector``, over ``--window``). The design's procedure decides:

1. The loop waits for data at least ``INPUT_SHARE`` of its step time (the host-side view of a GPU busy less than
   80 %): the job is input-bound, else compute-bound (storage is not what holds it back; a checkpoint share of
   ``CHECKPOINT_SHARE`` or more is storage-bound on the checkpoint tier).
2. Input-bound: the loader's time split tells why: more time waiting for storage reads than transforming is
   storage-bound, the other way CPU-bound (transforms); then the storage signals (read latency, throughput, the
   prefetch hit ratio) and the next step for the tier the job reads.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .. import cli
from ..cli_types import URL, Integer, Pattern, Source
from ..steps import read_share, storage_goodput

INPUT_SHARE = 0.20
"""Data wait over step time from which a job is input-bound (a GPU idle a fifth of the time: below 80 % busy)."""
CHECKPOINT_SHARE = 0.10
"""Checkpoint blocking over step time from which the checkpoint tier holds the job back."""
GPU_BUSY = 0.80
"""The design's GPU utilisation floor."""
COUNTERS = {
    "steps": "ai_storage_steps_total",
    "step": "ai_storage_step_seconds_total",
    "wait": "ai_storage_step_data_wait_seconds_total",
    "checkpoint": "ai_storage_step_checkpoint_seconds_total",
    "read": "ai_storage_read_seconds_sum",
    "reads": "ai_storage_read_seconds_count",
    "read_bytes": "ai_storage_read_bytes_total",
    "shard_reads": "ai_storage_read_shards_total",
    "transform": "ai_storage_loader_transform_seconds_total",
    "hits": "ai_storage_prefetch_hits_total",
    "misses": "ai_storage_prefetch_misses_total",
    "restore": "ai_storage_checkpoint_restore_seconds_sum",
    "lost": "ai_storage_lost_progress_seconds_total",
}
GPU_GAUGE = "ai_storage_gpu_utilization_ratio"
PROMETHEUS = Pattern("an http(s) URL of Prometheus", URL.pattern, "http://prometheus:9090")
SELECTOR = Pattern("a series selector in braces", r"\{[^{}]*\}", '{namespace="team-a",pod=~"llm-.*"}')
WINDOW = Pattern("a Prometheus duration such as 10m", r"[0-9]+(ms|s|m|h|d|w|y)", "10m")
NEXT_STEPS = {
    "cold": "warm the Fluid dataset (a DataLoad) or stage the data to the hot tier "
    "(python -m ai_storage_training stage); check the JuiceFS cache hit ratio",
    "warm": "stage the data to the hot tier (python -m ai_storage_training stage)",
    "hot": "the local NVMe is the fastest tier: read fewer, larger files",
}


class JobMetricsError(ValueError):
    """The job's metrics cannot be read or hold no step timing (one line for the command)."""


def from_scrape(text: str) -> dict[str, float]:
    """The figures of one scrape (the text format): each counter summed over its series, the GPU gauge's mean."""
    sums: dict[str, float] = {}
    gpu: list[float] = []
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
                if sample.name == GPU_GAUGE:
                    gpu.append(sample.value)
    except ValueError as e:
        raise JobMetricsError(f"not the Prometheus text format ({e})") from None
    figures = {key: sums.get(name, 0.0) for key, name in COUNTERS.items()}
    if gpu:
        figures["gpu"] = sum(gpu) / len(gpu)
    return figures


def from_prometheus(url: str, selector: str, window: str) -> dict[str, float]:
    """The figures of the pods ``selector`` picks, each counter's increase over ``window``, GPU utilisation from the
    DCGM exporter (or the library's NVML gauge) averaged over it."""
    figures = {key: _query(url, f"sum(increase({name}{selector}[{window}]))") for key, name in COUNTERS.items()}
    gpu = _query(url, f"avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL{selector}[{window}])) / 100", missing=None)
    if gpu is None:
        gpu = _query(url, f"avg(avg_over_time({GPU_GAUGE}{selector}[{window}]))", missing=None)
    if gpu is not None:
        figures["gpu"] = gpu
    return {key: value for key, value in figures.items() if value is not None}


def _query(url: str, query: str, missing: float | None = 0.0) -> float | None:
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        with urllib.request.urlopen(address, timeout=30) as r:
            answer = json.load(r)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise JobMetricsError(f"--prometheus {url}: {e}") from None
    if answer.get("status") != "success":
        raise JobMetricsError(f"--prometheus {url}: {answer.get('error', answer)} (query {query})")
    result = answer["data"]["result"]
    return float(result[0]["value"][1]) if result else missing


def judge(figures: dict[str, float], tier: str | None = None) -> dict[str, Any]:
    """The verdict (compute-bound, CPU-bound, storage-bound), the figures that decided it and the next step."""
    f = figures
    if f.get("steps", 0) <= 0 or f.get("step", 0) <= 0:
        raise JobMetricsError(
            "no step timing (ai_storage_steps_total is 0 or absent): the job does not run the step timer "
            "(ai_storage_training.steps.StepTimer) or has not finished a step yet"
        )
    wait, ckpt = f["wait"] / f["step"], f["checkpoint"] / f["step"]
    loader = f.get("read", 0.0) + f.get("transform", 0.0)
    lookups = f.get("hits", 0.0) + f.get("misses", 0.0)
    restore, lost = f.get("restore", 0.0), f.get("lost", 0.0)
    reads = read_share(f.get("read", 0.0), f.get("transform", 0.0))
    shares = {
        "step_seconds": round(f["step"] / f["steps"], 4),
        "data_wait_share": round(wait, 3),
        "checkpoint_share": round(ckpt, 3),
        "compute_share": round(max(0.0, 1 - wait - ckpt), 3),
        "loader_read_share": round(reads, 3) if loader else None,
        "gpu_busy": round(f["gpu"], 3) if "gpu" in f else None,
        "prefetch_hit_ratio": round(f["hits"] / lookups, 3) if lookups else None,
        "storage_goodput": round(storage_goodput(f["step"], f["wait"], f["checkpoint"], restore, lost, reads), 3),
        "data_wait_on_cpu_share": round(wait * (1 - reads), 3) if loader else None,
        "read_mb_s": round(f.get("read_bytes", 0.0) / f["step"] / 1e6, 1),  # what the job read per second of steps
    }
    waited = f"the loop waits for data {wait:.0%} of its step time"
    if wait < INPUT_SHARE:
        verdict, why = "compute-bound", f"{waited} (< {INPUT_SHARE:.0%})"
        step = "storage does not hold this job back; nothing to change on the tiers"
        if ckpt >= CHECKPOINT_SHARE:
            verdict, why = "storage-bound", f"checkpoint saves block the loop {ckpt:.0%} of its step time"
            step = "save less often or asynchronously (AsyncCheckpointer), or give the checkpoint tier faster disks"
    elif not loader:
        verdict, why = "input-bound", f"{waited}; the loader's split is unknown"
        step = "run the DataLoader workers with $PROMETHEUS_MULTIPROC_DIR set, so their read and transform times count"
    elif reads >= 0.5:
        verdict, why = "storage-bound", f"{waited}; its loader waits on reads {reads:.0%} of its time"
        step = _storage_step(f, tier, shares["prefetch_hit_ratio"])
    else:
        verdict, why = "CPU-bound", f"{waited}; its loader transforms {1 - reads:.0%} of its time"
        step = "more DataLoader workers (num_workers), lighter transforms, or decode on the GPU"
    if shares["gpu_busy"] is not None:
        why += f"; GPU busy {shares['gpu_busy']:.0%}"
    return {"verdict": verdict, "because": why, "next_step": step, "tier": tier, "figures": shares}


def _storage_step(f: dict[str, float], tier: str | None, hit_ratio: float | None) -> str:
    """What to do about reads that hold the job back, for the tier it reads."""
    step = NEXT_STEPS.get(tier or "", "stage the data to a faster tier (python -m ai_storage_training stage)")
    size = f.get("read_bytes", 0.0) / f["reads"] if f.get("reads") else None
    packed = f.get("shard_reads", 0.0) >= f.get("reads", 0.0) / 2 > 0  # most reads are of packed shards
    if size is not None and size < 1024 * 1024:
        step += (
            f"; its shards are small ({size / 1024:.0f} KiB on average): pack the version again with larger ones "
            "(python -m ai_storage_training pack --shard-mib)"
            if packed
            else "; pack the small files into shards (python -m ai_storage_training pack)"
        )
    if hit_ratio is not None and hit_ratio < 0.9:
        step += "; read further ahead (ShardDataset readahead=)"
    return step


def summary(result: dict[str, Any]) -> str:
    """The verdict as a person reads it."""
    figures = ", ".join(f"{key} {value}" for key, value in result["figures"].items() if value is not None)
    return f"{result['verdict']}: {result['because']}\nnext step: {result['next_step']}\nfigures: {figures}"


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """The ``doctor job`` subcommand."""
    job = subparsers.add_parser(
        "doctor job",
        help="is a training job's GPU fed? a verdict from its metrics",
        description=__doc__.split("\n\n")[0],
    )
    job.add_argument(
        "source",
        nargs="?",
        metavar="METRICS",
        type=Source("the job's metrics endpoint or a saved scrape"),
        help="the job's metrics endpoint (http://POD:9095/metrics) or a file holding one scrape",
    )
    job.add_argument("--prometheus", metavar="URL", type=PROMETHEUS, help="read the job's pods from this Prometheus")
    job.add_argument("--selector", type=SELECTOR, help=f"with --prometheus: the job's series, e.g. {SELECTOR.example}")
    job.add_argument("--window", type=WINDOW, default="10m", help="with --prometheus: the range the figures cover")
    job.add_argument("--tier", choices=sorted(NEXT_STEPS), help="the tier the job reads (the next step depends on it)")
    job.add_argument("--json", action="store_true", help="print the verdict as JSON")
    job.add_argument("--timeout", type=Integer(1, 600), default=30, help="seconds to wait for the endpoint")


def _scrape(source: str, timeout: int) -> str:
    if source.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(source, timeout=timeout) as r:
                return r.read().decode()
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise JobMetricsError(f"METRICS {source}: {e}") from None
    try:
        return Path(source).read_text()
    except OSError as e:
        raise JobMetricsError(
            f"METRICS {source}: {e.strerror or e} (expected an http(s) URL or a scrape file)"
        ) from None


def run(args: argparse.Namespace) -> int:
    """Read the figures, print the verdict; exit 2 with one line when they cannot be read or hold no steps."""
    prog = f"{cli.PROG} doctor job"
    try:
        if (args.source is None) == (args.prometheus is None):
            raise JobMetricsError("expected METRICS (an endpoint or a scrape file) or --prometheus URL, one of them")
        if args.prometheus and args.selector is None:
            raise JobMetricsError(f"--selector: expected the job's series with --prometheus, e.g. {SELECTOR.example}")
        if args.prometheus:
            figures = from_prometheus(args.prometheus, args.selector, args.window)
        else:
            figures = from_scrape(_scrape(args.source, args.timeout))
        result = judge(figures, args.tier)
    except JobMetricsError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return cli.EXIT_BAD_ARGUMENTS
    print(json.dumps(result, indent=1) if args.json else summary(result))
    return cli.EXIT_OK
