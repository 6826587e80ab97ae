"""Item checksums: the size and CRC32C of each byte range a DCP writer wrote as one item, so that a reader
verifies each item as it reads it (``__<rank>.items.json`` in a checkpoint, listed in its marker like any file)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from . import layout

Items = dict[str, dict[int, tuple[int, int]]]
"""file -> offset -> (length, CRC32C) of each item."""


def item_records(path: Path, files: Iterable[str]) -> Items:
    """The item checksums of checkpoint ``path``, from each items file among ``files`` (its marker's).
    OSError or ValueError when one is unreadable."""
    found: Items = {}
    for name in sorted(files):
        if name.endswith(layout.ITEMS_SUFFIX):
            document = json.loads((path / name).read_text())
            for file, items in document["files"].items():
                found[str(file)] = {int(offset): (int(length), int(crc, 16)) for offset, length, crc in items}
    return found


def items_document(items: Items) -> dict[str, object]:
    """What an items file holds (JSON)."""
    files = {
        name: [[offset, length, f"{crc:08x}"] for offset, (length, crc) in sorted(ranges.items())]
        for name, ranges in sorted(items.items())
    }
    return {"format": 1, "files": files}
