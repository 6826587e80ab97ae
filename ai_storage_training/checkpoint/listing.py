"""``list DIR``: every committed step of a checkpoint directory, when it was committed, its size, and the training
metrics the job saved with it, as a table or ``--json``. Reads the ``COMPLETE`` markers only: no lock, no
validation (``restore-test`` and ``doctor --checkpoints`` validate). Markers from before the records show the time
and metrics as unknown. Below the table: the progress a restart would lose now, from the step timer's record
(``steps.py``). Exit status 0, also when there is no committed step (the table says so)."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ..cli import EXIT_OK
from ..cli_types import Directory
from ..steps import progress_at_risk, risk_line
from . import layout
from .commit import read_marker

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def size_text(size: float) -> str:
    """A size as a person reads it: ``13.2 MiB``, ``1.50 GiB``, ``512 B``."""
    unit = 0
    while size >= 1024 and unit < len(UNITS) - 1:
        size, unit = size / 1024, unit + 1
    return f"{size:.0f} B" if unit == 0 else f"{size:.{1 if size >= 10 else 2}f} {UNITS[unit]}"


def torn_steps(directory: str | os.PathLike[str]) -> list[int]:
    """The steps of ``directory`` whose marker is there but unreadable (a flipped byte, a truncated write): torn,
    not restorable. A step with no marker at all is one being written or deleted by retention (its marker goes
    first), not torn."""
    return sorted(
        step
        for name in os.listdir(directory)
        if (step := layout.parse_step(name)) is not None
        and (Path(directory, name) / layout.MARKER).exists()
        and read_marker(Path(directory, name)) is None
    )


def listing(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every committed step of ``directory`` (a step directory with a readable marker) and every torn one (``torn``
    true, its figures None), oldest first."""
    rows: list[dict[str, Any]] = [
        {"step": step, "torn": True, "committed_at": None, "bytes": None, "files": None, "world_size": None}
        | {"run_id": None, "metrics": {}}
        for step in torn_steps(directory)
    ]
    for name in sorted(os.listdir(directory)):
        if layout.parse_step(name) is None:
            continue
        marker = read_marker(Path(directory, name))
        if marker is None:
            continue  # torn (above), or being deleted by retention (its marker goes first)
        rows.append(
            {
                "step": marker.step,
                "torn": False,
                "committed_at": marker.committed_at or None,
                "bytes": sum(record.size for record in marker.files.values()),
                "files": len(marker.files),
                "world_size": marker.world_size,
                "run_id": marker.run_id,
                "metrics": marker.metrics,
            }
        )
    return sorted(rows, key=lambda row: row["step"])


def table(directory: str | os.PathLike[str], rows: list[dict[str, Any]]) -> str:
    """The rows as the text table ``list`` prints."""
    if not rows:
        return f"no committed checkpoint in {directory}"
    lines = [f"{'step':>10}  {'committed (UTC)':<25}  {'size':>10}  {'files':>5}  {'ranks':>5}  metrics"]
    for row in rows:
        if row["torn"]:
            lines.append(f"{row['step']:>10}  TORN: its {layout.MARKER} marker is unreadable; not restorable")
            continue
        metrics = " ".join(f"{name}={value:g}" for name, value in sorted(row["metrics"].items())) or "-"
        size = size_text(row["bytes"])
        when = row["committed_at"] or "unknown"
        lines.append(f"{row['step']:>10}  {when:<25}  {size:>10}  {row['files']:>5}  {row['world_size']:>5}  {metrics}")
    return "\n".join(lines)


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> None:
    """The ``list`` subcommand."""
    parser = subparsers.add_parser(
        "list",
        help="list the committed checkpoints of a directory with their time, size and training metrics",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument(
        "directory",
        metavar="DIR",
        type=Directory("the checkpoint directory, e.g. /checkpoints/<job>"),
        help="a job's checkpoint directory ($AI_STORAGE_CHECKPOINT_DIR)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of a table")


def run(args: argparse.Namespace) -> int:
    rows = listing(args.directory)
    if args.json:
        print(json.dumps(rows, sort_keys=True), flush=True)
        return EXIT_OK
    committed = [row for row in rows if not row["torn"]]
    risk = progress_at_risk(args.directory, committed[-1]["step"] if committed else None)
    print(table(args.directory, rows) + (f"\n{risk_line(risk)}" if risk else ""), flush=True)
    return EXIT_OK
