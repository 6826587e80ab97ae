"""``restore-test DIR``: restore the newest durable checkpoint read-only and validate every file, for a CronJob.

It reads every file the newest committed step's ``COMPLETE`` marker lists and compares its size and CRC32C, and for a
``torch.distributed.checkpoint`` step (a ``.metadata`` file) checks that every shard file DCP's global plan names
is among them (when torch is installed). It changes nothing in DIR: the step is leased with a shared ``flock``
when the lock file can be made, and on a read-only mount (no lock file possible) it checks instead that the step's
marker is unchanged after the read. A newest step whose marker is there but unreadable (torn, or a flipped byte) fails
the test, naming it and the newest step that validates. It prints one JSON line; on success it sets
``ai_storage_checkpoint_restore_test_timestamp_seconds`` and, with ``--textfile``, writes it in Prometheus text
format (for node-exporter's textfile collector or a push). A failed test leaves the textfile as it was, so the
timestamp keeps the last success. Exit status: 0 ok, 1 the newest step is missing or refused, 2 bad arguments,
3 an error while running.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, write_to_textfile

from .. import metrics
from ..cli import EXIT_CHECK_FAILED, EXIT_OK
from ..cli_types import Directory, OutputFile
from ..progress import Progress
from . import layout
from .commit import Marker, problems, read_marker
from .listing import torn_steps
from .locks import lock, unlock

READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """The ``restore-test`` subcommand."""
    parser = subparsers.add_parser(
        "restore-test",
        help="restore the newest durable checkpoint read-only and validate every file",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "directory",
        metavar="DIR",
        type=Directory("the durable checkpoint directory, e.g. /checkpoints/<job>"),
        help="the durable checkpoint directory (a job's $AI_STORAGE_CHECKPOINT_DIR)",
    )
    parser.add_argument(
        "--textfile",
        type=OutputFile("the Prometheus text file"),
        help="on success, write the restore-test timestamp metric to this file (Prometheus text format)",
    )


@contextlib.contextmanager
def _lease(directory: Path, step: int) -> Iterator[bool]:
    """A shared lock on ``step`` (True), or False when the directory is read-only (no lock file can be made)."""
    path = directory / layout.lock_file(step)
    try:
        fd = lock(path, shared=True)
    except OSError as error:
        if error.errno not in READ_ONLY:
            raise
        yield False
        return
    if fd is None:
        raise RuntimeError(f"step {step} in {directory} is locked by a writer or a deletion; try again")
    try:
        yield True
    finally:
        unlock(path, fd)


def _dcp_problems(path: Path, marker: Marker) -> tuple[bool, list[str]]:
    """(checked, problems): every file DCP's ``.metadata`` names must be listed in the marker."""
    if ".metadata" not in marker.files:
        return False, []
    try:
        from torch.distributed.checkpoint import FileSystemReader
    except ImportError:
        return False, []
    storage = FileSystemReader(str(path)).read_metadata().storage_data or {}
    named = {str(Path(info.relative_path)) for info in storage.values()}
    return True, [f"{name}: named by .metadata, not in {layout.MARKER}" for name in sorted(named - set(marker.files))]


def _marked(directory: Path, step: int) -> bool:
    return read_marker(directory / layout.step_dir(step)) is not None


def restore_test(directory: Path) -> dict[str, Any]:
    """Validate the newest committed step of ``directory``; the result document (``status`` ok or failed)."""
    started = time.monotonic()
    committed = [s for n in os.listdir(directory) if (s := layout.parse_step(n)) is not None and _marked(directory, s)]
    result: dict[str, Any] = {"directory": str(directory), "step": None}
    torn = torn_steps(directory)
    if torn and (not committed or torn[-1] > max(committed)):
        older = f"; the newest that validates is step {max(committed)}" if committed else ""
        return {
            **result,
            "step": torn[-1],
            "status": "failed",
            "problems": [f"step {torn[-1]}: its {layout.MARKER} marker is unreadable (torn or corrupted){older}"],
        }
    if not committed:
        return {**result, "status": "failed", "problems": [f"no committed checkpoint in {directory}"]}
    step = result["step"] = max(committed)
    path = directory / layout.step_dir(step)
    with _lease(directory, step) as leased:
        marker = read_marker(path)
        if marker is None:
            raise RuntimeError(f"{path} lost its {layout.MARKER} marker during the test (retention?); try again")
        progress = Progress("restore-test", sum(record.size for record in marker.files.values()))
        reading = time.monotonic()
        found = problems(path, marker, verify="crc32c", on_file=progress.add)
        read_seconds = time.monotonic() - reading
        progress.close()
        dcp_checked, dcp_found = _dcp_problems(path, marker)
        if not leased and read_marker(path) != marker:
            raise RuntimeError(f"{path} changed during the test (no lock on a read-only mount); try again")
    seconds = time.monotonic() - started
    size = sum(record.size for record in marker.files.values())
    return {
        **result,
        "status": "failed" if found or dcp_found else "ok",
        "files": len(marker.files),
        "bytes": size,
        "seconds": round(seconds, 3),
        "read_seconds": round(read_seconds, 3),
        # the reads alone, as the progress bar shows them (seconds adds DCP's metadata check and importing torch)
        "mb_per_s": round(size / 1e6 / read_seconds, 1) if read_seconds > 0 else None,
        "checksums": all(record.crc32c is not None for record in marker.files.values()),
        "dcp_metadata_checked": dcp_checked,
        "leased": leased,
        "problems": found + dcp_found,
    }


def run(args: argparse.Namespace) -> int:
    result = restore_test(args.directory)
    if result["status"] == "ok":
        now = time.time()
        result["timestamp"] = now
        metrics.RESTORE_TEST_TIMESTAMP.set(now)
        if args.textfile is not None:
            registry = CollectorRegistry()
            Gauge(
                "ai_storage_checkpoint_restore_test_timestamp_seconds",
                "Unix time of the last successful restore test.",
                registry=registry,
            ).set(now)
            write_to_textfile(str(args.textfile), registry)
    print(json.dumps(result, sort_keys=True), flush=True)
    return EXIT_OK if result["status"] == "ok" else EXIT_CHECK_FAILED
