"""The doctor's ``design`` profile: the design's diagnostic load on the volume under test, with fio.

Three stories, one after the other, in a scratch directory it makes and removes (``.ai-storage-doctor-<id>`` under
the checkpoint directory or PATH): a sequential write (1 MiB blocks, 4 jobs, a file each), sequential reads of
those files (1 MiB, 4 jobs) and random reads across them (4 KiB, 16 jobs). Direct I/O where the filesystem takes
it (probed first; the report says when it does not, e.g. a FUSE mount without direct I/O, and the reads then run
buffered with each file's cached pages dropped first). Each story runs for a third of ``seconds`` at most and fio
is stopped at ``seconds``; the report gives each story's aggregate and every job's own figure. Before anything is
written it checks that the files fit the free space with a tenth to spare, and refuses otherwise.
"""

from __future__ import annotations

import mmap
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from .fio import FioError, run_fio

STORIES = (
    ("seq-write", "write", 1024 * 1024, 4),
    ("seq-read", "read", 1024 * 1024, 4),
    ("rand-read", "randread", 4096, 16),
)
"""(name, fio rw, block bytes, jobs): the design's sequential write, sequential read and random read."""
WRITERS = STORIES[0][3]
SPARE = 1.1
"""The scratch files may take at most the free space over this."""


class DesignRefusedError(ValueError):
    """The design profile cannot run here: its files would not fit, or it cannot write (nothing was written)."""


def free_bytes(directory: Path) -> int:
    stat = os.statvfs(directory)
    return stat.f_bavail * stat.f_frsize


def plan(where: Path, budget: int) -> int:
    """Bytes of each writer's file for ``budget`` bytes in all; DesignRefusedError when they do not fit."""
    each = max(1024 * 1024, budget // WRITERS // (1024 * 1024) * 1024 * 1024)
    needed, free = int(each * WRITERS * SPARE), free_bytes(where)
    if needed > free:
        raise DesignRefusedError(
            f"--profile design: its scratch files need {needed / 2**20:,.0f} MiB under {where} "
            f"({WRITERS} x {each / 2**20:,.0f} MiB and a tenth to spare), {free / 2**20:,.0f} MiB are free: "
            "lower --read-mib or free space"
        )
    return each


def direct_io(scratch: Path) -> bool:
    """True when the filesystem takes O_DIRECT writes (what fio's ``direct=1`` does)."""
    probe, block = scratch / ".direct-probe", mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT wants
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
    except OSError:
        return False
    try:
        os.write(fd, block)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)
        block.close()


def job_file(scratch: Path, each: int, seconds: int, direct: bool) -> str:
    """The fio job file of the three stories (every clone reported on its own: the per-job figures)."""
    files = ":".join(f"design.{i}" for i in range(WRITERS))
    runtime = max(1, (seconds - 3) // len(STORIES))
    lines = ["[global]", "ioengine=psync", f"directory={scratch}", f"direct={int(direct)}", "invalidate=1", ""]
    for name, rw, block, jobs in STORIES:
        lines += [f"[{name}]", "stonewall", f"rw={rw}", f"bs={block}", f"numjobs={jobs}", f"runtime={runtime}"]
        if rw == "write":
            lines += [f"size={each}", "filename_format=design.$jobnum", "end_fsync=1"]
        else:  # every reader over every written file
            lines += [f"filename={files}", f"io_size={each}"]
        lines += ["file_service_type=random", ""] if rw == "randread" else [""]
    return "\n".join(lines)


def _story(jobs: list[dict[str, Any]], name: str, rw: str) -> dict[str, Any]:
    """A story's aggregate and per-job figures from fio's JSON (one entry per job clone)."""
    side = "write" if rw == "write" else "read"
    picked = [j[side] for j in jobs if j["jobname"] == name]
    per_job_mb_s = [round(r["bw_bytes"] / 1e6, 1) for r in picked]
    ios = sum(r["total_ios"] for r in picked)
    seconds = max((r["runtime"] for r in picked), default=0) / 1000
    latency = sum(r["lat_ns"]["mean"] * r["lat_ns"]["N"] for r in picked)
    return {
        "jobs": len(picked),
        "mb_s": round(sum(per_job_mb_s), 1),
        "iops": round(sum(r["iops"] for r in picked), 1),
        "latency_ms": round(latency / ios / 1e6, 3) if ios else None,
        "seconds": round(seconds, 3),
        "per_job_mb_s": per_job_mb_s,
        "per_job_iops": [round(r["iops"], 1) for r in picked],
    }


def design_test(where: Path, budget: int, seconds: int) -> dict[str, Any]:
    """The design profile under ``where``: the three stories' figures (aggregate and per job), direct I/O or not,
    the scratch directory (removed). DesignRefusedError before anything is written when the files do not fit."""
    each = plan(where, budget)
    scratch = where / f".ai-storage-doctor-{uuid.uuid4().hex[:12]}"
    try:
        scratch.mkdir()
    except OSError as e:
        raise DesignRefusedError(
            f"--profile design writes its scratch files under {where}: {e.strerror}; pass a writable --checkpoint-dir"
        ) from None
    try:
        direct = direct_io(scratch)
        job = job_file(scratch, each, seconds, direct)
        try:
            jobs = run_fio(job, timeout=seconds, readonly=False)["jobs"]
        except FioError as e:
            return {"skipped": str(e), "scratch": str(scratch)}
        stories = {name: _story(jobs, name, rw) for name, rw, _, _ in STORIES}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "direct_io": direct,
        "direct_io_note": None if direct else "the filesystem refused O_DIRECT: buffered, cached pages dropped",
        "file_bytes": each,
        "seconds_limit": seconds,
        "scratch": str(scratch),
        "stories": stories,
    }
