"""The doctor's read tests with fio, over any number of files.

fio takes a job's files as one ``filename=`` value, separated by ':', and refuses a value over 4096 characters
(about 150 short paths). So the files go into groups whose names, relative to the group's common directory
(``directory=``), fit one value; each group is one fio job, and every job waits for the one before it
(``stonewall``), so the reads stay one stream as a single reader makes them. The figures are summed over the
jobs. Names fio's job-file parser would change (``#`` and ``;`` start a comment, ``$`` a substitution, outer
blanks are stripped) are left to the Python reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

VALUE_LIMIT = 4000
"""Characters of one ``filename=`` value (fio refuses more than 4096)."""
MAX_GROUPS = 1000
"""fio jobs per test: fio runs at most 4096 jobs in all; files past this many groups are not read by fio."""
TIMEOUT_SECONDS = 900
UNSAFE = frozenset("#;$\n\r")


class FioError(RuntimeError):
    """fio failed, timed out or reported nothing usable."""


def fio_safe(path: Path) -> bool:
    """True when fio's job-file parser takes ``path`` as it is."""
    text = str(path)
    return not UNSAFE.intersection(text) and all(part == part.strip() for part in path.parts)


def _escape(text: str) -> str:
    return text.replace(":", "\\:")


def _prefix_length(directory: str) -> int:
    """Characters a name loses when given relative to ``directory``."""
    escaped = len(_escape(directory))
    return escaped if directory.endswith("/") else escaped + 1


def groups(files: list[Path], limit: int = VALUE_LIMIT) -> list[tuple[str, list[Path]]]:
    """``files`` in order, as (common directory, files) groups whose relative names, ':'-joined, fit ``limit``."""
    found: list[tuple[str, list[Path]]] = []
    common, full = "", 0
    members: list[Path] = []
    for f in files:
        name = str(f)
        widened = os.path.commonpath([common, str(f.parent)]) if members else str(f.parent)
        length = full + len(_escape(name)) - (len(members) + 1) * _prefix_length(widened) + len(members)
        if members and length > limit:
            found.append((common, members))
            widened, members, full = str(f.parent), [], 0
        common, full = widened, full + len(_escape(name))
        members.append(f)
    if members:
        found.append((common, members))
    return found


def _job(name: str, rw: str, block: int, directory: str, members: list[Path], io_size: int) -> list[str]:
    names = ":".join(_escape(os.path.relpath(f, directory)) for f in members)
    service = "sequential" if rw == "read" else "random"
    return [
        f"[{name}]",
        "stonewall",
        f"rw={rw}",
        f"bs={block}",
        f"file_service_type={service}",
        f"directory={_escape(directory)}",
        f"filename={names}",
        f"io_size={io_size}",
    ]


def job_file(files: list[Path], budget: int, sequential: int, random_block: int) -> tuple[str, int]:
    """The fio job file for both tests, and how many of ``files`` it reads."""
    chosen = groups(files)[:MAX_GROUPS]
    lines = ["[global]", "ioengine=psync", "invalidate=1", "thread"]
    for rw, block in (("read", sequential), ("randread", random_block)):
        left = budget
        for i, (directory, members) in enumerate(chosen):
            size = min(left, sum(f.stat().st_size for f in members))
            if size < block:
                break
            lines += _job(f"{rw}-{i}", rw, block, directory, members, size)
            left -= size
    return "\n".join(lines) + "\n", sum(len(members) for _, members in chosen)


def run_fio(job: str, *, timeout: float | None = None, readonly: bool = True) -> dict[str, Any]:
    """fio's JSON report of the job file ``job`` (``--readonly`` unless told otherwise), stopped at ``timeout``
    (default ``TIMEOUT_SECONDS``); FioError when it fails, times out or reports nothing usable."""
    timeout = TIMEOUT_SECONDS if timeout is None else timeout
    with tempfile.NamedTemporaryFile("w", suffix=".fio") as f:
        f.write(job)
        f.flush()
        command = ["fio", *(["--readonly"] if readonly else []), "--output-format=json", f.name]
        try:
            proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            raise FioError(f"fio did not finish within {timeout:g} s") from None
        except OSError as e:
            raise FioError(f"fio could not start: {e}") from None
    if proc.returncode != 0:
        detail = " ".join(proc.stderr.split())[-300:] or "no message"
        raise FioError(f"fio exited {proc.returncode}: {detail}")
    try:
        result: dict[str, Any] = json.loads(proc.stdout[proc.stdout.index("{") :])
        return result
    except ValueError:
        raise FioError("fio's output is not the JSON report asked for") from None


def _sums(jobs: list[dict[str, Any]], prefix: str) -> tuple[int, int, float, float]:
    """Bytes, I/Os, seconds and summed latency (ns) of the jobs named ``prefix-N``."""
    picked = [j["read"] for j in jobs if j["jobname"].startswith(f"{prefix}-")]
    seconds = sum(r["runtime"] for r in picked) / 1000
    latency = sum(r["lat_ns"]["mean"] * r["lat_ns"]["N"] for r in picked)
    return sum(r["io_bytes"] for r in picked), sum(r["total_ios"] for r in picked), seconds, latency


def fio_reads(files: list[Path], budget: int, sequential: int, random_block: int) -> dict[str, Any]:
    """Sequential and random reads of ``files`` (``budget`` bytes each test) with fio, summed over its jobs."""
    job, covered = job_file([f.absolute() for f in files], budget, sequential, random_block)
    try:
        jobs = run_fio(job)["jobs"]
        seq_bytes, _, seq_seconds, _ = _sums(jobs, "read")
        _, rand_ios, rand_seconds, rand_latency = _sums(jobs, "randread")
    except (KeyError, TypeError) as e:
        raise FioError(f"fio's JSON report lacks {e}") from None
    if seq_seconds <= 0 or rand_seconds <= 0 or rand_ios == 0:
        raise FioError("fio measured no reads (each test took less than a millisecond)")
    return {
        "tool": "fio",
        "fio_files": covered,
        "fio_jobs": len(jobs),
        "sequential_bytes": seq_bytes,
        "block_bytes": {"sequential": sequential, "random": random_block},
        "sequential_mb_s": round(seq_bytes / seq_seconds / 1e6, 1),
        "random_iops": round(rand_ios / rand_seconds, 1),
        "random_latency_ms": round(rand_latency / rand_ios / 1e6, 3),
    }
