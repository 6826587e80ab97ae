"""The file-based protocol several ranks use to commit one checkpoint on a shared filesystem (no torch needed).

Every rank of one attempt shares a run id (``CheckpointManager(run_id=...)`` or ``$AI_STORAGE_RUN_ID``), which
names the step's staging directory ``.step-NNNNNNNN.tmp-<run id>/``. For step N:

1. each rank, holding the step's lock shared (so no cleaner removes the staging directory under it), removes a
   manifest of its own left from before, writes its files, fsyncs them and every directory, then writes its
   manifest ``.rank-RRRRR.json`` (run id, rank, step, every file with size and CRC32C; fsynced under a temporary
   name, renamed, directory fsynced) and releases the lock, leaving the lock file for the coordinator to remove
   (on another node, reopening a lock file this rank removed could meet a stale cached entry: see ``commit``);
2. the coordinator (rank 0) waits, at most ``timeout`` seconds, until all ``world_size`` manifests of its run id
   are there, takes the step's lock exclusively, checks every listed file's size, renames the staging directory
   to ``step-NNNNNNNN/`` and writes ``COMPLETE`` last, listing every file of every rank: the one commit point;
3. the other ranks wait (same bound) for that marker carrying their run id. A rank or coordinator that fails
   writes ``.abort`` into the staging directory, so the others fail at once instead of waiting out the bound.
   An aborted step is not saved again under the same run id: the job restarts with a new one.

A rank killed at any moment leaves a manifest missing, so the step is never committed; the staging directory of
a dead attempt (another run id) is never committed and is removed by the next ``clean()`` under the step's lock.
On restore the coordinator writes the step it validated to ``.resume-<run id>.json``; the other ranks resume
from that step, so all ranks agree even when the coordinator refused the newest one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from . import layout
from .commit import FileRecord, read_marker, write_json_atomically

ABORT = ".abort"
POLL_SECONDS = 0.05


def write_manifest(staging: Path, *, rank: int, run_id: str, step: int, files: dict[str, FileRecord]) -> None:
    """Step 1's last act: the rank's files are durable; say so."""
    document = {"run_id": run_id, "rank": rank, "step": step, "files": {n: r.to_json() for n, r in files.items()}}
    write_json_atomically(staging / layout.rank_manifest(rank), document)


def read_manifest(staging: Path, rank: int, run_id: str) -> dict[str, FileRecord] | None:
    """The files rank ``rank`` of ``run_id`` made durable in ``staging``, or None when its manifest is not there."""
    try:
        document = json.loads((staging / layout.rank_manifest(rank)).read_text())
    except (OSError, ValueError):
        return None
    if document.get("run_id") != run_id or document.get("rank") != rank:
        return None
    return {name: FileRecord.from_json({**value, "rank": rank}) for name, value in document["files"].items()}


def wait_for_manifests(
    staging: Path, *, world_size: int, run_id: str, timeout: float, ranks: range | None = None
) -> dict[str, FileRecord]:
    """Step 2's wait: every rank's files (of ``ranks``, default all ``world_size``: the ranks sharing the directory),
    merged; TimeoutError naming the ranks still missing after ``timeout``."""
    deadline = time.monotonic() + timeout
    found: dict[int, dict[str, FileRecord]] = {}
    expected = range(world_size) if ranks is None else ranks
    while True:
        for rank in expected:
            if rank not in found and (files := read_manifest(staging, rank, run_id)) is not None:
                found[rank] = files
        if len(found) == len(expected):
            return {name: record for files in found.values() for name, record in files.items()}
        if (reason := _aborted(staging)) is not None:
            raise RuntimeError(f"{staging.name} will not be committed: {reason}")
        if time.monotonic() > deadline:
            missing = sorted(set(expected) - set(found))
            abort(staging, f"ranks {missing} wrote no manifest within {timeout}s")
            raise TimeoutError(f"{staging.name}: ranks {missing} did not finish their shards within {timeout}s")
        time.sleep(POLL_SECONDS)


def abort(staging: Path, reason: str) -> None:
    """Tell the waiting ranks this attempt's step will not be committed."""
    if staging.is_dir():
        (staging / ABORT).write_text(reason)


def _aborted(staging: Path) -> str | None:
    try:
        return (staging / ABORT).read_text()
    except OSError:
        return None


def wait_for_commit(final: Path, staging: Path, *, run_id: str, timeout: float) -> None:
    """Step 3: return once ``final`` carries the marker of ``run_id``; RuntimeError when the coordinator gave up
    or another run committed the step; TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        marker = read_marker(final)
        if marker is not None:
            if marker.run_id != run_id:
                raise FileExistsError(f"checkpoint {final} was committed by another run ({marker.run_id})")
            return
        if (reason := _aborted(staging)) is not None:
            raise RuntimeError(f"the coordinator did not commit {final.name}: {reason}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{final.name} was not committed by the coordinator within {timeout}s")
        time.sleep(POLL_SECONDS)


def publish_resume(directory: Path, run_id: str, step: int | None, error: str | None = None) -> None:
    """The coordinator's restore decision for the other ranks of ``run_id`` (or why it could not decide)."""
    write_json_atomically(directory / layout.resume_file(run_id), {"step": step, "error": error})


def wait_for_resume(directory: Path, run_id: str, timeout: float) -> int | None:
    """The step the coordinator of ``run_id`` chose (None: start afresh); TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            decision = json.loads((directory / layout.resume_file(run_id)).read_text())
            step, error = decision["step"], decision.get("error")
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the coordinator of run {run_id} chose no step to resume from within {timeout}s"
                ) from None
            time.sleep(POLL_SECONDS)
            continue
        if error:
            raise RuntimeError(f"the coordinator of run {run_id} chose no step to resume from: {error}")
        return None if step is None else int(step)
