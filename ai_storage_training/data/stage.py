"""``python -m ai_storage_training stage --source VERSION_DIR --dest DIR``: copy a packed dataset version (its
manifest's shards) from the cold tier onto a node-local hot volume, checking each shard's size and CRC32C against
the manifest from the very bytes written, and write the manifest last: DEST is valid only when its manifest is
there. DEST's old manifest is removed before any shard is touched and on any refusal, so a refused or
interrupted copy is never taken for valid. A DEST already holding the version (the same manifest bytes, every
shard verified) is not copied again. Refusals (exit 1): a manifest missing, truncated, of another version
(``--version``, default the name of the source directory) or not matching ``--manifest-sha256``
($AI_STORAGE_DATASET_MANIFEST_SHA256); a shard missing or differing. Standard library and crc32c only:
the init container needs no torch.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..checkpoint.commit import copy_file, crc32c_file, fsync_dir
from ..cli_types import Directory, Hex, Name, OutputDirectory
from ..progress import Progress
from . import manifest as mf


def _verified(dest: Path, manifest: mf.Manifest, shard: mf.Shard) -> bool:
    path = dest / shard.name
    if not path.is_file():
        return False
    record = crc32c_file(path)
    return (record.size, f"{record.crc32c:08x}") == (shard.size, shard.crc32c)


def _unmark(dest: Path) -> None:
    """Remove DEST's manifest (durably): whatever DEST holds is no longer taken for a valid copy."""
    if (dest / mf.MANIFEST).exists():
        (dest / mf.MANIFEST).unlink()
        fsync_dir(dest)


def _copy(source: Path, dest: Path, manifest: mf.Manifest, shard: mf.Shard) -> None:
    """Copy one shard under a hidden name, checksumming the bytes as written; rename only if they match."""
    tmp = dest / f".{shard.name}.tmp"
    tmp.unlink(missing_ok=True)  # left by a copy cut short
    try:
        try:
            record = copy_file(source / shard.name, tmp)  # fsynced
        except FileNotFoundError:
            raise mf.missing(manifest, shard, source / shard.name) from None
        mf.check_shard(manifest, shard, record.size, f"{record.crc32c:08x}")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, dest / shard.name)


def stage(
    source: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    version: str | None = None,
    sha256: str | None = None,
) -> tuple[mf.Manifest, bool]:
    """Stage ``source`` onto ``dest``; return (manifest, copied: False when DEST already held it verified).
    Raises :class:`manifest.DatasetError` on any refusal, leaving DEST without a manifest."""
    source, dest = Path(source), Path(dest)
    try:
        manifest = mf.load(source, version=source.name if version is None else version, sha256=sha256)
    except mf.DatasetError:
        _unmark(dest)
        raise
    raw = manifest.raw
    dest.mkdir(parents=True, exist_ok=True)
    old = dest / mf.MANIFEST
    if old.is_file() and old.read_bytes() == raw and all(_verified(dest, manifest, s) for s in manifest.shards):
        return manifest, False
    _unmark(dest)
    listed = {s.name for s in manifest.shards}
    for p in dest.iterdir():  # shards of another version, or leftovers of an interrupted copy
        if p.name not in listed and (mf.SHARD_NAME.fullmatch(p.name) or p.name.startswith(".shard-")):
            p.unlink()
    progress = Progress("stage", sum(shard.size for shard in manifest.shards))
    for shard in manifest.shards:
        if not _verified(dest, manifest, shard):
            _copy(source, dest, manifest, shard)
        progress.add(shard.size)
    progress.close()
    fsync_dir(dest)
    mf.publish(dest, raw)
    return manifest, True


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("stage", help="copy a dataset version onto a local volume, verified against its manifest")
    p.add_argument(
        "--source",
        type=Directory("a dataset version: manifest.json + shards"),
        required=True,
        help="the dataset version directory (manifest.json + shards)",
    )
    p.add_argument(
        "--dest",
        type=OutputDirectory("the staged copy", parents=True),
        required=True,
        help="where to stage, on the local volume",
    )
    p.add_argument(
        "--version", type=Name("a version"), help="expected version (default: the name of the source directory)"
    )
    p.add_argument(
        "--manifest-sha256",
        type=Hex(64),
        default=os.environ.get(mf.SHA256_VARIABLE) or None,
        help=f"expected SHA-256 of manifest.json (default ${mf.SHA256_VARIABLE})",
    )
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    try:
        manifest, copied = stage(args.source, args.dest, version=args.version, sha256=args.manifest_sha256)
    except mf.DatasetError as e:
        return _fail(1, f"refused: {e}; {args.dest} is not marked valid")
    except OSError as e:
        return _fail(3, f"{e}; {args.dest} is not marked valid")
    what = "staged" if copied else "already staged and verified, nothing copied:"
    print(f"{what} {manifest.describe()} ({len(manifest.shards)} shards, {manifest.samples} samples) in {args.dest}")
    return 0


def _fail(status: int, message: str) -> int:
    print(f"stage: {message}", file=sys.stderr)
    return status
