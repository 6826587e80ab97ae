"""The commit primitives every checkpoint writer shares: CRC32C records, durability, the marker, validation.

The ``COMPLETE`` marker (JSON, written last: temporary name, fsynced, renamed, directory fsynced) reads::

    {"format": 3, "step": 20, "run_id": "3f2a...", "world_size": 2,
     "committed_at": "2026-11-26T10:31:07+00:00", "metrics": {"loss": 1.73, "tokens": 81920000},
     "files": {"__0_0.distcp": {"size": 1048576, "crc32c": "1c2f4a9e", "rank": 0}, ...}, "crc32c": "0b7e..."}

It lists every file of every rank (relative path, size, CRC32C) and its records (``records``), and its own CRC32C
(format 3): a changed byte in the marker makes it unreadable rather than a list naming a file that never existed.
Markers from before checksums (``"files": {name: size}``) validate by size only; format 2 markers have no own CRC32C.

Validation (:func:`problems`) re-reads every listed file and compares size and CRC32C (``verify="crc32c"``, about
9 GB/s on one core: what reading the checkpoint once costs), or only sizes (``verify="size"``, a stat per file).
The locks that guard them are ``locks.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import crc32c

from . import layout
from .items import item_records
from .records import checked_metrics, utc_now

SYNC_WORKERS = 16
"""Files fsynced (or checksummed) at once: on JuiceFS each fsync uploads the file's blocks."""
CHUNK = 8 * 1024 * 1024
PARALLEL_READS = 16 * 1024 * 1024
"""Bytes to checksum from which :func:`problems` reads files on several threads."""
VERIFY_MODES = ("crc32c", "size")


class CheckpointInvalidError(ValueError):
    """A checkpoint's files do not match its marker (the message names each file and what differs)."""


class CheckpointBusyError(RuntimeError):
    """Another process holds the step's lock (saving it, reading it or deleting it)."""


@dataclass(frozen=True)
class FileRecord:
    """One file of a checkpoint as the marker lists it. ``crc32c`` is None in markers older than checksums."""

    size: int
    crc32c: int | None
    rank: int = 0

    def to_json(self) -> dict[str, object]:
        crc = None if self.crc32c is None else f"{self.crc32c:08x}"
        return {"size": self.size, "crc32c": crc, "rank": self.rank}

    @classmethod
    def from_json(cls, value: object) -> FileRecord:
        if isinstance(value, int) and not isinstance(value, bool):  # a marker written before checksums
            return cls(value, None)
        if not isinstance(value, dict) or not isinstance(value.get("size"), int):
            raise ValueError(f"a file record needs a size; got {value!r}")
        crc = value.get("crc32c")
        return cls(value["size"], None if crc is None else int(crc, 16), int(value.get("rank", 0)))


@dataclass(frozen=True)
class Marker:
    """A parsed ``COMPLETE`` marker."""

    step: int
    files: dict[str, FileRecord]
    run_id: str = ""
    world_size: int = 1
    committed_at: str = ""  # ISO 8601, UTC; empty in markers from before the records
    metrics: dict[str, float] = field(default_factory=dict)  # what the job saved with the step: loss, tokens, ...


class SummedStream(io.RawIOBase):
    """A file opened for writing that keeps the size and CRC32C of every byte written through it (the DCP writer's
    files, the packer's shards)."""

    def __init__(self, raw: IO[bytes]):
        self.raw, self.size, self.crc32c = raw, 0, 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.crc32c = crc32c.crc32c(data, self.crc32c)  # any buffer, not copied (torch passes memoryviews)
        self.size += memoryview(data).nbytes
        return self.raw.write(data)

    def tell(self) -> int:
        return self.size

    def fileno(self) -> int:
        return self.raw.fileno()

    def flush(self) -> None:
        if not self.raw.closed:
            self.raw.flush()

    def close(self) -> None:
        super().close()
        self.raw.close()


def crc32c_file(path: str | os.PathLike[str]) -> FileRecord:
    """Size and CRC32C of a file, read in 8 MiB blocks."""
    crc, size, buffer = 0, 0, bytearray(CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            crc = crc32c.crc32c(view[:n], crc)
            size += n
    return FileRecord(size, crc)


def copy_file(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> FileRecord:
    """Copy ``source`` to a new file ``target`` (fsynced), computing its size and CRC32C from the copied bytes."""
    crc, size = 0, 0
    with open(source, "rb", buffering=0) as src, open(target, "xb", buffering=0) as dst:
        while data := src.read(CHUNK):
            crc = crc32c.crc32c(data, crc)
            dst.write(data)
            size += len(data)
        os.fsync(dst.fileno())
    return FileRecord(size, crc)


def fsync_dir(path: str | os.PathLike[str]) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: str) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _sync_and_sum(path: str) -> FileRecord:
    """fsync a file, then checksum it while its bytes are still in the page cache."""
    _fsync_file(path)
    return crc32c_file(path)


def sync_tree(root: Path, *, checksum: bool = True, rank: int = 0) -> dict[str, FileRecord]:
    """fsync every file under ``root`` (in parallel) and every directory bottom-up; return each file's record by
    its path under ``root`` (size and, with ``checksum``, CRC32C read back right after the fsync)."""
    walk = list(os.walk(root, topdown=False))
    paths = [os.path.join(directory, name) for directory, _, names in walk for name in names]

    def one(path: str) -> FileRecord:
        record = _sync_and_sum(path) if checksum else FileRecord(_fsync_file(path), None)
        return FileRecord(record.size, record.crc32c, rank)

    with ThreadPoolExecutor(max_workers=SYNC_WORKERS) as pool:
        records = list(pool.map(one, paths))
    for directory, _, _ in walk:
        fsync_dir(directory)
    return {os.path.relpath(path, root): record for path, record in zip(paths, records, strict=True)}


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` completely or not at all: a temporary hidden name beside it, fsynced, renamed
    over ``path``, the directory fsynced; on a failure before the rename the temporary file is removed and
    ``path`` is left as it was."""
    temporary = path.parent / f".{path.name}.tmp-{uuid.uuid4().hex[:12]}"
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json_atomically(path: Path, document: object) -> None:
    """:func:`write_atomically` of ``document`` as JSON (keys sorted)."""
    write_atomically(path, json.dumps(document, sort_keys=True).encode())


def write_marker(final: Path, marker: Marker) -> None:
    """Write ``COMPLETE`` into ``final``: the commit point of a checkpoint."""
    files = {name: record.to_json() for name, record in sorted(marker.files.items())}
    document: dict[str, Any] = {"format": 3, "step": marker.step, "run_id": marker.run_id}
    document.update(world_size=marker.world_size, committed_at=marker.committed_at or utc_now())
    if marker.metrics:
        document["metrics"] = dict(marker.metrics)
    document["files"] = files
    write_json_atomically(final / layout.MARKER, {**document, "crc32c": _document_crc(document)})


def _document_crc(document: dict[str, Any]) -> str:
    """The marker's own CRC32C (format 3): of its JSON without the ``crc32c`` key, keys sorted."""
    return f"{crc32c.crc32c(json.dumps(document, sort_keys=True).encode()):08x}"


def read_marker(path: Path) -> Marker | None:
    """The marker of checkpoint directory ``path``, or None when it is missing or unreadable."""
    try:
        document = json.loads((path / layout.MARKER).read_text())
        claimed = document.pop("crc32c", None)
        if document.get("format", 2) >= 3 and claimed != _document_crc(document):
            return None  # a byte changed in the marker itself: unreadable, as if torn
        files = {str(name): FileRecord.from_json(value) for name, value in document["files"].items()}
        step, run_id, world_size = (
            int(document["step"]),
            str(document.get("run_id", "")),
            int(document.get("world_size", 1)),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    try:  # the records: an unreadable one is left out, the checkpoint still loads
        recorded = checked_metrics(document.get("metrics"))
    except ValueError:
        recorded = {}
    committed = document.get("committed_at")
    return Marker(step, files, run_id, world_size, committed if isinstance(committed, str) else "", recorded)


def is_complete(path: Path) -> bool:
    """True when ``path`` carries a valid marker and every file the marker lists has its size (a copy restored
    under another name counts too). No checksum is read: :func:`problems` does that."""
    marker = read_marker(path)
    return marker is not None and not problems(path, marker, verify="size")


def problems(
    path: Path, marker: Marker, verify: str = "crc32c", on_file: Callable[[int], object] | None = None
) -> list[str]:
    """What differs between checkpoint ``path`` and its marker: one line per file (missing, size, CRC32C).
    ``verify="items"`` reads only the files no items file covers (their reader verifies each item it reads).
    ``on_file(size)`` is called as each file is checked (progress)."""
    covered: set[str] = set()
    if verify == "items":
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):  # unreadable: its CRC32C says why
            covered = set(item_records(path, marker.files))

    def check(item: tuple[str, FileRecord]) -> str | None:
        try:
            return compare(*item)
        finally:
            if on_file is not None:
                on_file(item[1].size)

    def compare(name: str, expected: FileRecord) -> str | None:
        try:
            size = (path / name).stat().st_size
            if size != expected.size:
                return f"{name}: {size} bytes, the marker says {expected.size}"
            if verify in ("crc32c", "items") and expected.crc32c is not None and name not in covered:
                actual = crc32c_file(path / name).crc32c
                if actual != expected.crc32c:
                    return f"{name}: CRC32C {actual:08x}, the marker says {expected.crc32c:08x}"
        except OSError as error:
            return f"{name}: {error.strerror or error}"
        return None

    files = sorted(marker.files.items())
    reads = sum(r.size for n, r in files if verify != "size" and r.crc32c is not None and n not in covered)
    if reads < PARALLEL_READS:  # a few small files (DCP's .metadata and items files): threads cost more than they save
        return [line for line in map(check, files) if line]
    with ThreadPoolExecutor(max_workers=SYNC_WORKERS) as pool:
        return [line for line in pool.map(check, files) if line]


def move_aside(path: Path, into: Path) -> Path:
    """Rename ``path`` into the hidden directory ``into`` under a unique name; both parents fsynced."""
    into.mkdir(exist_ok=True)
    target = into / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
    os.rename(path, target)
    fsync_dir(path.parent)
    fsync_dir(into)
    return target
