"""The doctor's judgement: findings (measured figures against their thresholds, and observations), the verdict,
and the summary a person reads."""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path
from typing import Any

from ..steps import risk_line
from .thresholds import THRESHOLDS, Status

MIB = 1024 * 1024
SOURCES = {
    "read_throughput_mb_s": ("reads", "sequential_mb_s", "sequential read", "MB/s"),
    "read_latency_ms": ("reads", "random_latency_ms", "random read latency", "ms"),
    "cache_hit_ratio_percent": ("juicefs", "hit_ratio_percent", "JuiceFS cache hit ratio", "%"),
    "prefetch_hit_ratio_percent": ("prefetch", "hit_ratio_percent", "prefetch hit ratio", "%"),
    "checkpoint_save_seconds": ("checkpoint", "save_seconds", "checkpoint save (slowest)", "s"),
    "checkpoint_restore_seconds": ("checkpoint", "restore_seconds", "checkpoint restore", "s"),
    "checkpoint_save_failure_percent": ("checkpoint", "failure_percent", "checkpoint save failures", "%"),
}
"""Each threshold's figure: (report section, key, label, unit)."""


def observation(check: str, label: str, status: Status, detail: str) -> dict[str, Any]:
    """A finding that is not a measured figure (a tool that failed, a torn checkpoint, ...)."""
    return {"check": check, "label": label, "status": status, "detail": detail}


def figure_findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each measured figure judged against its threshold."""
    found = []
    for name, (section, key, label, unit) in SOURCES.items():
        value = (report.get(section) or {}).get(key)
        if value is None:
            continue
        threshold = THRESHOLDS[name]
        found.append(
            {
                "figure": name,
                "label": label,
                "value": value,
                "unit": unit,
                "status": threshold.judge(value),
                "thresholds": threshold.describe(),
            }
        )
    return found


def tool_findings(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A read tool that failed: a warning (the figures come from the Python reads instead)."""
    error = (report.get("reads") or {}).get("fio_error")
    if not error:
        return []
    return [observation("fio", "read tool", "warning", f"{error}; reads measured in Python instead")]


def verdict(findings: list[dict[str, Any]]) -> Status:
    """The worst status of the findings (``ok`` when there are none)."""
    statuses = {f["status"] for f in findings}
    return "critical" if "critical" in statuses else "warning" if "warning" in statuses else "ok"


def _juicefs_lines(juicefs: dict[str, Any]) -> list[str]:
    stats = juicefs.get("stats")
    if not stats:
        return [f"  JuiceFS: {juicefs['note']}"]
    cached = stats.get("blockcache_bytes", 0) / MIB
    return [
        f"  JuiceFS cache: {cached:.0f} MiB in {stats.get('blockcache_blocks', 0):g} blocks, "
        f"{stats.get('blockcache_evicts', 0):g} evicted since mount"
    ]


def meminfo() -> dict[str, int]:
    """``/proc/meminfo`` in bytes by field (empty where there is none)."""
    found: dict[str, int] = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, value = line.partition(":")
            found[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return found


def host_identity() -> dict[str, Any]:
    """Which machine measured: host name, kernel, CPUs, memory and the page cache's size (``/proc/meminfo``)."""
    memory = meminfo()
    return {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "memory_bytes": memory.get("MemTotal"),
        "page_cache_bytes": memory.get("Cached"),
    }


def design_reads(design: dict[str, Any]) -> dict[str, Any]:
    """The design profile's read figures as the thresholds judge them (aggregates over the jobs)."""
    if "stories" not in design:
        return {"skipped": design.get("skipped", "the design profile did not run")}
    seq, rand = design["stories"]["seq-read"], design["stories"]["rand-read"]
    return {
        "tool": "fio (design profile)",
        "sequential_mb_s": seq["mb_s"],
        "random_iops": rand["iops"],
        "random_latency_ms": rand["latency_ms"],
    }


def _design_lines(design: dict[str, Any]) -> list[str]:
    lines = []
    for name, story in design.get("stories", {}).items():
        jobs = ", ".join(f"{v:g}" for v in story["per_job_mb_s"])
        lines.append(f"  design {name}: {story['jobs']} jobs, {story['mb_s']:g} MB/s ({jobs}), {story['iops']:g} IOPS")
    if design.get("stories"):
        lines.append(f"  design: direct I/O {'yes' if design['direct_io'] else 'no: ' + design['direct_io_note']}")
    return lines


def checkpoints_line(state: dict[str, Any]) -> str:
    """One line: what the job's checkpoint directory holds (its findings are listed above it)."""
    valid = len([c for c in state["committed"] if not c["problems"]])
    newest = state["newest_valid_step"]
    line = (
        f"  checkpoints in {state['directory']}: {valid} of {len(state['committed'])} committed validate "
        f"({state['verify']}), newest valid step {newest if newest is not None else 'none'}"
    )
    if newest is not None:
        recorded = " ".join(f"{k}={v:g}" for k, v in sorted(state.get("newest_valid_metrics", {}).items()))
        line += (
            f" (committed {state.get('newest_valid_committed_at') or 'unknown'}{', ' + recorded if recorded else ''})"
        )
    line += f"; {len(state['in_flight'])} in flight, {len(state['retired'])} retired"
    staging, available = state.get("staging_bytes_per_rank"), state.get("host_memory_available_bytes")
    if staging:
        line += f"; staging {staging / MIB:,.0f} MiB of host memory per rank per save in flight"
        line += f" ({available / MIB:,.0f} MiB available)" if available is not None else ""
    return line


def summary(report: dict[str, Any]) -> str:
    """A few lines a person reads: the findings with their status, what was skipped, the verdict."""
    fs, host = report["filesystem"], report.get("host") or {}
    lines = [f"ai-storage doctor: {report['path']} ({fs['type'] or 'unknown'} at {fs['mountpoint']})"]
    if host:
        cache = (host.get("page_cache_bytes") or 0) / 2**30
        lines.append(
            f"  host {host['hostname']}: kernel {host['kernel']}, {host['cpus']} CPUs, "
            f"{(host.get('memory_bytes') or 0) / 2**30:.1f} GiB memory, {cache:.1f} GiB page cache"
        )
    for f in report["findings"]:
        if "figure" in f:
            value = f"{f['value']:g} {f['unit']}"
            lines.append(f"  {f['label']:<28} {value:>14}  {f['status'].upper():<8} ({f['thresholds']})")
        else:
            lines.append(f"  {f['label']:<28} {'':>14}  {f['status'].upper():<8} {f['detail']}")
    for section in ("reads", "prefetch", "checkpoint"):
        skipped = (report.get(section) or {}).get("skipped")
        if skipped:
            lines.append(f"  {section}: skipped: {skipped}")
    if report.get("design"):
        lines += _design_lines(report["design"])
    if report.get("juicefs"):
        lines += _juicefs_lines(report["juicefs"])
    if report.get("checkpoints"):
        lines.append(checkpoints_line(report["checkpoints"]))
        if report["checkpoints"].get("progress_at_risk"):
            lines.append(f"  {risk_line(report['checkpoints']['progress_at_risk'])}")
    lines.append(f"  verdict: {report['status'].upper()}")
    return "\n".join(lines)
