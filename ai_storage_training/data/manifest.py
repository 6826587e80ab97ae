"""A packed dataset version's manifest and its checks: what the packer writes last, and what the stage command
and the dataset reader refuse before any sample of a shard is used.

Layout: ``<root>/<dataset>/<version>/`` holds ``shard-NNNNNN.tar`` (WebDataset tar shards) and ``manifest.json``,
written last and atomically: ``{"format": "webdataset", "dataset", "version", "samples", "shards": [{"name",
"size", "samples", "crc32c"}]}`` (``crc32c``: 8 hex digits, Castagnoli, of the whole shard file). Standard library
and crc32c only (no torch).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path

import crc32c

from ..checkpoint.commit import write_atomically

FORMAT = "webdataset"
MANIFEST = "manifest.json"
SHARD_NAME = re.compile(r"shard-\d{6}\.tar")
VERSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
DIR_VARIABLE = "AI_STORAGE_DATASET_DIR"
SHA256_VARIABLE = "AI_STORAGE_DATASET_MANIFEST_SHA256"


class DatasetError(ValueError):
    """A dataset version refused: its manifest or a shard does not match what was expected."""


@dataclasses.dataclass(frozen=True)
class Shard:
    name: str
    size: int
    samples: int
    crc32c: str


@dataclasses.dataclass(frozen=True)
class Manifest:
    dataset: str
    version: str
    shards: tuple[Shard, ...]
    sha256: str
    """SHA-256 (hex) of the manifest file's bytes."""
    raw: bytes = dataclasses.field(repr=False, compare=False, default=b"")
    """The manifest file's bytes."""

    @property
    def samples(self) -> int:
        return sum(s.samples for s in self.shards)

    def describe(self) -> str:
        return f"dataset {self.dataset} version {self.version}"


def crc32c_hex(data: bytes | memoryview) -> str:
    return f"{crc32c.crc32c(data):08x}"


def to_json(dataset: str, version: str, shards: list[Shard]) -> bytes:
    body = {
        "format": FORMAT,
        "dataset": dataset,
        "version": version,
        "samples": sum(s.samples for s in shards),
        "shards": [dataclasses.asdict(s) for s in shards],
    }
    return (json.dumps(body, indent=1) + "\n").encode()


def parse(raw: bytes, where: Path) -> Manifest:
    """The manifest in ``raw`` (read from ``where``); :class:`DatasetError` when it is truncated or malformed."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise DatasetError(f"{where}: truncated or not JSON ({e}); re-stage or re-pack this version") from None
    try:
        if body["format"] != FORMAT:
            raise DatasetError(f"{where}: format {body['format']!r}; expected {FORMAT!r}")
        shards = tuple(
            Shard(str(s["name"]), int(s["size"]), int(s["samples"]), str(s["crc32c"])) for s in body["shards"]
        )
        manifest = Manifest(str(body["dataset"]), str(body["version"]), shards, hashlib.sha256(raw).hexdigest(), raw)
        total = int(body["samples"])
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, DatasetError):
            raise
        raise DatasetError(f"{where}: malformed manifest ({type(e).__name__}: {e}); re-pack this version") from None
    bad = [s.name for s in shards if not SHARD_NAME.fullmatch(s.name) or not re.fullmatch(r"[0-9a-f]{8}", s.crc32c)]
    if bad or not shards or total != manifest.samples:
        raise DatasetError(f"{where}: malformed manifest (shards {bad or 'empty or sample total wrong'})")
    return manifest


def expected_sha256(value: str | None = None) -> str:
    """``value`` (default ``$AI_STORAGE_DATASET_MANIFEST_SHA256``) checked: 64 hex digits, or empty for none."""
    expected = (value if value is not None else os.environ.get(SHA256_VARIABLE, "")).strip().lower()
    if expected and not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise ValueError(f"manifest SHA-256: expected 64 hex digits; got {expected!r} (or ${SHA256_VARIABLE})")
    return expected


def load(directory: str | os.PathLike[str], *, version: str | None = None, sha256: str | None = None) -> Manifest:
    """Read and check ``directory/manifest.json``: refused when missing, truncated, of another version than
    ``version``, or whose bytes do not hash to ``sha256`` (default ``$AI_STORAGE_DATASET_MANIFEST_SHA256``)."""
    where = Path(directory) / MANIFEST
    expected = expected_sha256(sha256)
    try:
        raw = where.read_bytes()
    except FileNotFoundError:
        raise DatasetError(f"{where}: missing (the version was never published, or staging did not finish)") from None
    manifest = parse(raw, where)
    if expected and manifest.sha256 != expected:
        raise DatasetError(
            f"{where}: SHA-256 {manifest.sha256} does not match the expected {expected} "
            f"({manifest.describe()}); the copy is not the version the job was given"
        )
    if version is not None and manifest.version != version:
        raise DatasetError(f"{where}: holds version {manifest.version!r} of {manifest.dataset}; expected {version!r}")
    return manifest


def check_shard(manifest: Manifest, shard: Shard, size: int, crc32c: str) -> None:
    """Refuse a shard whose size or CRC32C differs from its manifest entry, naming both."""
    if size != shard.size:
        raise DatasetError(
            f"shard {shard.name} of {manifest.describe()}: size {size} bytes, manifest says {shard.size}"
        )
    if crc32c != shard.crc32c:
        raise DatasetError(
            f"shard {shard.name} of {manifest.describe()}: CRC32C {crc32c}, manifest says {shard.crc32c}"
        )


def missing(manifest: Manifest, shard: Shard, path: Path) -> DatasetError:
    return DatasetError(f"shard {shard.name} of {manifest.describe()}: missing ({path})")


def publish(directory: Path, raw: bytes) -> None:
    """Write ``directory/manifest.json`` atomically (``commit.write_atomically``). Call it after every shard it
    lists is fsynced in place."""
    write_atomically(directory / MANIFEST, raw)
