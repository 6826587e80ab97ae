"""The doctor's reading of a job's real checkpoint directory (``--checkpoints DIR``), read-only.

Each ``step-*`` directory is checked against its ``COMPLETE`` marker with the checkpoint library's own
validation (``commit.read_marker`` and ``commit.problems``: CRC32C of every byte, or sizes only with
``--verify size``). Hidden entries are sorted by the layout's names: staging directories and lock files (in
flight when touched within ``--stale-minutes``, else left by a crash), ``.refused/`` (checkpoints a restore
refused), ``.retired/`` (abandoned by a rollback), resume decisions. The doctor takes no lock, so it cannot
delay or fail a running job's save; that is why a crash's leftovers are told from a live save by their age.

Host memory: an asynchronous save stages each rank's state in host memory (pinned under CUDA), once per save in
flight: the report gives one rank's share of the newest valid step beside the host's available memory, and warns
when that share alone does not fit.

Verdict: a committed step whose files differ from its marker (size or CRC32C), or steps with none that
validates, is critical (the job resumes from an older step, or from nothing); a torn step (no valid marker),
a refused step, a stale staging directory or lock file, or a marker without checksums is a warning.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ..checkpoint import claim, layout
from ..checkpoint.commit import problems, read_marker
from ..steps import PROGRESS_FILE, progress_at_risk
from .report import meminfo, observation

SHOWN = 5
"""Names shown per finding (the report lists all)."""


def _newest_mtime(path: Path) -> float:
    """The newest modification time of ``path`` and everything under it."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for directory, dirs, names in os.walk(path):
            for name in dirs + names:
                try:
                    newest = max(newest, os.lstat(os.path.join(directory, name)).st_mtime)
                except FileNotFoundError:
                    continue
    return newest


def _committed(path: Path, verify: str) -> dict[str, Any] | None:
    """One ``step-*`` directory: its marker's files and what differs from them; None when torn (no valid marker);
    empty when the job's retention deleted it meanwhile (its marker goes first, then the files)."""
    marker = read_marker(path) if path.is_dir() else None
    if marker is None:
        return None
    found = problems(path, marker, verify=verify)
    if found and read_marker(path) is None:
        return {}
    return {
        "name": path.name,
        "step": marker.step,
        "files": len(marker.files),
        "bytes": sum(r.size for r in marker.files.values()),
        "world_size": marker.world_size,
        "checksums": all(r.crc32c is not None for r in marker.files.values()),
        "committed_at": marker.committed_at or None,
        "metrics": marker.metrics,
        "problems": found,
    }


def _held_aside(directory: Path, verify: str) -> list[dict[str, Any]]:
    """The checkpoints in a hidden holding directory (``.refused/``, ``.retired/``), each with what differs."""
    try:
        names = sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    held = []
    for name in names:
        marker = read_marker(directory / name)
        found = problems(directory / name, marker, verify=verify) if marker else ["no valid COMPLETE marker"]
        held.append({"name": name, "problems": found})
    return held


def _sort(directory: Path, name: str, state: dict[str, Any], stale_before: float, verify: str) -> None:
    path = directory / name
    if layout.parse_step(name) is not None:
        entry = _committed(path, verify)
        if entry is None:
            state["torn"].append(name)
        elif entry:
            state["committed"].append(entry)
    elif layout.parse_staging(name) is not None or layout.parse_lock(name) is not None:
        age = "stale" if _newest_mtime(path) < stale_before else "in_flight"
        state[age].append(name)
    elif name in (layout.REFUSED, layout.RETIRED):
        state[name.lstrip(".")] = _held_aside(path, verify)
    elif name == PROGRESS_FILE:
        pass  # the step timer's record: progress_at_risk
    elif name == layout.JOB_LOCK:
        state["written_by"] = claim.held_by(directory)  # the job writing here now (None: none)
    elif layout.parse_resume(name) is not None:
        state["resume_decisions"].append(name)
    else:
        state["other"].append(name)


def inspect(directory: Path, *, verify: str = "crc32c", stale_minutes: float = 60.0) -> dict[str, Any]:
    """What ``directory`` holds, sorted as above (nothing in it is changed)."""
    state: dict[str, Any] = {"directory": str(directory), "verify": verify, "stale_minutes": stale_minutes}
    for key in ("committed", "torn", "in_flight", "stale", "refused", "retired", "resume_decisions", "other"):
        state[key] = []
    state["written_by"] = None
    stale_before = time.time() - 60 * stale_minutes
    for name in sorted(os.listdir(directory)):
        try:
            _sort(directory, name, state, stale_before, verify)
        except FileNotFoundError:
            continue  # removed by the job since the listing
    valid = [c for c in state["committed"] if not c["problems"]]
    newest = max(valid, key=lambda c: c["step"]) if valid else None
    state["newest_valid_step"] = newest["step"] if newest else None
    state["newest_valid_committed_at"] = newest["committed_at"] if newest else None
    state["newest_valid_metrics"] = newest["metrics"] if newest else {}
    state["staging_bytes_per_rank"] = -(-newest["bytes"] // newest["world_size"]) if newest else None
    state["host_memory_available_bytes"] = meminfo().get("MemAvailable")
    state["progress_at_risk"] = progress_at_risk(directory, state["newest_valid_step"])
    return state


def _names(items: list[Any]) -> str:
    names = [i["name"] if isinstance(i, dict) else i for i in items]
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def findings(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The directory's state judged: see the module docstring for what is critical and what a warning."""
    found = []
    corrupt = [c for c in state["committed"] if c["problems"]]
    for c in corrupt:
        detail = f"{c['name']}: " + "; ".join(c["problems"][:SHOWN])
        found.append(observation("checkpoint_corrupt", "committed checkpoint differs", "critical", detail))
    if (state["committed"] or state["torn"]) and state["newest_valid_step"] is None:
        detail = f"none of {len(state['committed']) + len(state['torn'])} step directories validates"
        found.append(observation("checkpoint_none_valid", "no checkpoint to resume", "critical", detail))
    warnings = (
        ("checkpoint_torn", "torn checkpoint", state["torn"], "no valid COMPLETE marker (a save killed mid-commit)"),
        ("checkpoint_refused", "refused checkpoint", state["refused"], "refused by a restore, kept in .refused/"),
        ("checkpoint_stale", "leftover staging or lock", state["stale"], "untouched for longer than --stale-minutes"),
        (
            "checkpoint_unchecksummed",
            "checkpoint without checksums",
            [c for c in state["committed"] if not c["checksums"]],
            "its marker predates CRC32C: validated by size only",
        ),
    )
    for check, label, items, why in warnings:
        if items:
            found.append(observation(check, label, "warning", f"{len(items)}: {_names(items)} ({why})"))
    staging, available = state["staging_bytes_per_rank"], state["host_memory_available_bytes"]
    if staging and available is not None and staging > available:
        detail = (
            f"one rank's share of the newest checkpoint is {staging / 2**30:.1f} GiB, the host has "
            f"{available / 2**30:.1f} GiB available: asynchronous saves stage the state in host memory "
            "(its size x max_in_flight per rank)"
        )
        found.append(observation("checkpoint_staging_memory", "host memory for staging", "warning", detail))
    return found
