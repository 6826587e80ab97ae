"""The storage doctor: measure what a training job gets from its storage, from inside its pod.

``python -m ai_storage_training doctor PATH`` reads the training data under PATH sequentially and at random
(fio when it is installed, Python otherwise; with ``--profile design`` instead the design's parallel load on the
volume, ``design.py``), reads it through the PrefetchingReader as a job spending
``--step-ms`` per file would, times checkpoint saves and a restore with the CheckpointManager (in a temporary
directory under PATH or ``--checkpoint-dir``, removed afterwards), and where PATH is on a JuiceFS mount reads
the client's cache state from the mount's ``.stats`` and ``.config`` virtual files. With ``--checkpoints DIR``
it also reads a job's real checkpoint directory (doctor_checkpoints.py). The report names the host (name,
kernel, CPUs, memory, page cache). It writes a JSON report (``--json``, completely or not at all) and prints a
summary judged against the design's thresholds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import cli
from ..checkpoint.commit import VERIFY_MODES, write_atomically
from ..cli_types import Directory, Integer, Number, OutputFile
from .checkpoints import findings as checkpoint_findings
from .checkpoints import inspect
from .design import DesignRefusedError, design_test, plan
from .juicefs import JUICEFS_FSTYPE, cache_on_root, juicefs_state, mount_of
from .reads import MIB, data_files, prefetch_test, read_tests
from .report import design_reads, figure_findings, host_identity, observation, summary, tool_findings, verdict
from .timing import checkpoint_test


def diagnose(
    path: Path,
    *,
    checkpoint_dir: Path | None = None,
    read_mib: int = 256,
    checkpoint_mib: int = 64,
    saves: int = 2,
    step_ms: float = 20.0,
    use_fio: bool | None = None,
    checkpoints: Path | None = None,
    verify: str = "crc32c",
    stale_minutes: float = 60.0,
    profile: str = "quick",
    seconds: int = 60,
    say: Callable[[str], object] = lambda _: None,
) -> dict[str, Any]:
    """Run every test on ``path`` (and read the checkpoint directory ``checkpoints``); return the report.
    ``profile="design"``: the design's load (``design.py``) in ``seconds`` at most instead of the quick reads;
    DesignRefusedError before anything is written when its files do not fit. ``say`` is told each test as it
    starts (the command line prints it on stderr: a run takes tens of seconds)."""
    mountpoint, fstype = mount_of(path)
    report: dict[str, Any] = {
        "path": str(path),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "profile": profile,
        "host": host_identity(),
        "filesystem": {"mountpoint": mountpoint, "type": fstype},
    }
    files = data_files(path, read_mib * MIB)
    if profile == "design":
        plan(checkpoint_dir or path, read_mib * MIB)  # a refusal comes alone, before any progress line
        say(f"the design's load with fio on {checkpoint_dir or path} (at most {seconds} s)")
        report["design"] = design_test(checkpoint_dir or path, read_mib * MIB, seconds)
        report["reads"] = design_reads(report["design"])
    elif files:
        fio = shutil.which("fio") is not None if use_fio is None else use_fio
        say(f"reading {len(files)} files ({read_mib} MiB at most) of {path}, sequential and random")
        report["reads"] = read_tests(files, read_mib * MIB, fio)
    else:
        report["reads"] = {"skipped": f"no data files under {path}"}
    if files:
        say("prefetching: the files read as a job would, one step at a time")
        report["prefetch"] = prefetch_test(path, files, step_ms, read_mib * MIB)
    say(f"{saves} test checkpoints of {checkpoint_mib} MiB in {checkpoint_dir or path}")
    report["checkpoint"] = checkpoint_test(checkpoint_dir or path, checkpoint_mib * MIB, saves)
    report["juicefs"] = juicefs_state(mountpoint) if fstype == JUICEFS_FSTYPE else None
    report["findings"] = figure_findings(report) + tool_findings(report)
    for directory in cache_on_root(report["juicefs"] or {}):
        detail = (
            f"{directory} is on the node's root filesystem: the cache fills the system disk; put it on the node "
            "cache volume (localNvme.cacheVolume, juicefs.cache.cacheDir)"
        )
        report["findings"].append(observation("cache_on_root", "JuiceFS cache on the root disk", "warning", detail))
    if checkpoints is not None:
        say(f"reading the checkpoints of {checkpoints} ({verify})")
        report["checkpoints"] = inspect(checkpoints, verify=verify, stale_minutes=stale_minutes)
        report["findings"] += checkpoint_findings(report["checkpoints"])
    report["status"] = verdict(report["findings"])
    return report


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """The ``doctor`` subcommand."""
    doctor = subparsers.add_parser(
        "doctor",
        help="measure reads, prefetching, checkpoints and the JuiceFS cache",
        description=__doc__.split("\n\n")[0],
    )
    doctor.add_argument(
        "path", metavar="PATH", type=Directory("the training data, e.g. /data"), help="the training data directory"
    )
    doctor.add_argument("--json", type=OutputFile("the JSON report"), help="write the JSON report to this file")
    doctor.add_argument(
        "--checkpoint-dir",
        type=Directory("where to time test checkpoints"),
        help="where to time test checkpoints (default: PATH)",
    )
    doctor.add_argument(
        "--read-mib", type=Integer(1, 1024 * 1024), default=256, help="data to read per test, MiB (default 256)"
    )
    doctor.add_argument(
        "--checkpoint-mib",
        type=Integer(1, 16 * 1024),
        default=64,
        help="size of each test checkpoint, MiB, held in memory while written (default 64)",
    )
    doctor.add_argument("--saves", type=Integer(1, 100), default=2, help="test checkpoints to save (default 2)")
    doctor.add_argument(
        "--step-ms",
        type=Number(0, 60_000),
        default=20.0,
        help="the job's time per file (per sample of a packed dataset) for the prefetch test, ms (default 20)",
    )
    doctor.add_argument("--no-fio", action="store_true", help="measure reads in Python even when fio is installed")
    _profile_arguments(doctor)
    doctor.add_argument(
        "--checkpoints",
        type=Directory("a job's checkpoint directory, e.g. $AI_STORAGE_CHECKPOINT_DIR"),
        help="also read this job's checkpoint directory (read-only, no lock taken): committed, torn, refused and "
        "leftover steps",
    )
    doctor.add_argument(
        "--verify",
        choices=VERIFY_MODES,
        default="crc32c",
        help="how --checkpoints checks each step: crc32c reads every byte (the cost of one read), size stats only",
    )
    doctor.add_argument(
        "--stale-minutes",
        type=Number(1, 7 * 24 * 60),
        default=60.0,
        help="a staging directory or lock file untouched this long was left by a crash (default 60)",
    )


def _profile_arguments(doctor: argparse.ArgumentParser) -> None:
    """``--profile`` and ``--seconds``."""
    doctor.add_argument(
        "--profile",
        choices=("quick", "design"),
        default="quick",
        help="quick: one reader over the data (default, light enough inside a running job); design: the design's "
        "load with fio (4 sequential writers and readers of 1 MiB, 16 random readers of 4 KiB, direct I/O) on "
        "scratch files under --checkpoint-dir or PATH, removed afterwards",
    )
    doctor.add_argument(
        "--seconds",
        type=Integer(10, 3600),
        default=60,
        help="longest the design profile's fio runs (a third per story; default 60)",
    )


def run(args: argparse.Namespace) -> int:
    """Diagnose, write the report (if asked), print the summary; exit 1 on a critical verdict, 2 when the design
    profile would not fit the free space (nothing written)."""
    if args.profile == "design" and shutil.which("fio") is None:
        print(f"{cli.PROG} doctor: error: --profile design runs fio, which is not installed here", file=sys.stderr)
        return cli.EXIT_BAD_ARGUMENTS
    try:
        report = _diagnose(args)
    except DesignRefusedError as e:
        print(f"{cli.PROG} doctor: error: {e}", file=sys.stderr)
        return cli.EXIT_BAD_ARGUMENTS
    if args.json:
        write_atomically(args.json, (json.dumps(report, indent=1) + "\n").encode())
    print(summary(report))
    return cli.EXIT_CHECK_FAILED if report["status"] == "critical" else cli.EXIT_OK


def _diagnose(args: argparse.Namespace) -> dict[str, Any]:
    return diagnose(
        args.path,
        checkpoint_dir=args.checkpoint_dir,
        read_mib=args.read_mib,
        checkpoint_mib=args.checkpoint_mib,
        saves=args.saves,
        step_ms=args.step_ms,
        use_fio=False if args.no_fio else None,
        checkpoints=args.checkpoints,
        verify=args.verify,
        stale_minutes=args.stale_minutes,
        profile=args.profile,
        seconds=args.seconds,
        say=lambda what: print(f"{cli.PROG} doctor: {what}", file=sys.stderr, flush=True),
    )
