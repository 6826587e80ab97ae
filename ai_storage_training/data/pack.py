"""``python -m ai_storage_training pack SOURCE --root ROOT --dataset NAME --version V``: pack a directory of small
files (or the subset ``--files-from`` lists) into WebDataset tar shards of about ``--shard-mib`` each, on any
path (any tier), with a versioned manifest (manifest.py).

Samples follow WebDataset's convention: the files whose paths (relative to SOURCE) share everything up to the
first dot of the name are one sample (``a/img1.jpg`` + ``a/img1.cls`` -> key ``a/img1``); a name without a dot is
stored as ``.bin``. Each shard is written under a hidden temporary name with webdataset's TarWriter, fsynced and
renamed; the manifest is published last (manifest.publish). A version with a manifest is published and
immutable: packing onto it is refused (exit 1). Leftovers of a packer that died before publishing are removed by
the next pack of that version. Needs the ``torch`` extra (webdataset imports torch).
"""

from __future__ import annotations

import argparse
import fcntl
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ..checkpoint.commit import SummedStream, fsync_dir
from ..cli_types import Directory, File, Integer, Name, Number, OutputDirectory
from ..progress import Progress
from . import manifest as mf

DEFAULT_SHARD_MIB = 64
TAR_BLOCK = 512


class PublishedError(mf.DatasetError):
    """The version already has a manifest: it is immutable."""


def samples(source: Path, files: Iterable[str] | None = None) -> Iterator[tuple[str, dict[str, Path]]]:
    """``(key, {extension: path})`` for every sample under ``source`` (or of ``files``, relative to it), in
    key order; hidden names are left out."""
    if files is None:
        files = (
            str(Path(d, n).relative_to(source))
            for d, dirs, names in os.walk(source)
            for n in names
            if not n.startswith(".") and not any(p.startswith(".") for p in Path(d).relative_to(source).parts)
        )
    grouped: dict[str, dict[str, Path]] = {}
    for rel in files:
        rel = rel.strip().lstrip("/")
        if not rel:
            continue
        parent, _, name = rel.rpartition("/")
        stem, dot, ext = name.partition(".")
        key, ext = (f"{parent}/{stem}" if parent else stem), (ext if dot else "bin")
        if not stem or ext in grouped.get(key, {}):
            raise mf.DatasetError(f"{rel}: cannot be a WebDataset sample member (empty name or duplicate of {key})")
        grouped.setdefault(key, {})[ext] = source / rel
    yield from sorted(grouped.items())


def _clean(target: Path) -> None:
    """Remove what a packer that died before publishing left (never anything of a published version)."""
    for p in target.iterdir():
        if mf.SHARD_NAME.fullmatch(p.name) or p.name.startswith((".shard-", f".{mf.MANIFEST}.tmp")):
            p.unlink()


def _tar_bytes(members: dict[str, Path]) -> int:
    """A sample's size in the tar: a header block and the data rounded up to blocks, per member."""
    return sum(TAR_BLOCK + -(-p.stat().st_size // TAR_BLOCK) * TAR_BLOCK for p in members.values())


def _batches(items: list[tuple[str, dict[str, Path]]], shard_bytes: int, readers: int) -> list[list]:
    """Consecutive samples in shards of equal sample counts (the first ones one more where they do not divide):
    as many shards as about ``shard_bytes`` of tar each makes, rounded up to a multiple of ``readers`` (ranks x
    DataLoader workers), so every reader gets as many shards and even shares drop at most one sample per shard."""
    total = sum(_tar_bytes(members) for _, members in items)
    count = max(1, -(-total // shard_bytes))
    count = -(-count // readers) * readers
    if count > len(items):
        raise mf.DatasetError(
            f"--readers: {readers} readers need at least {count} shards of one sample or more; the source has "
            f"{len(items)} samples (pack for fewer readers)"
        )
    each, extra = divmod(len(items), count)
    batches, start = [], 0
    for index in range(count):
        end = start + each + (index < extra)
        batches.append(items[start:end])
        start = end
    return batches


def _write_shard(
    webdataset, target: Path, index: int, batch: list[tuple[str, dict[str, Path]]], progress: Progress
) -> mf.Shard:
    """One shard with webdataset's TarWriter, under a hidden name, fsynced, then renamed into place."""
    name = f"shard-{index:06d}.tar"
    with open(target / f".{name}.tmp", "wb") as f:
        stream = SummedStream(f)
        writer = webdataset.TarWriter(stream, encoder=False, mtime=0)
        for key, members in batch:
            writer.write({"__key__": key, **{ext: path.read_bytes() for ext, path in members.items()}})
            progress.add()
        writer.close()
        f.flush()
        os.fsync(f.fileno())
    os.replace(target / f".{name}.tmp", target / name)
    return mf.Shard(name, stream.size, len(batch), f"{stream.crc32c:08x}")


def pack(
    source: str | os.PathLike[str],
    root: str | os.PathLike[str],
    dataset: str,
    version: str,
    *,
    files: Iterable[str] | None = None,
    shard_bytes: int = DEFAULT_SHARD_MIB * 1024 * 1024,
    readers: int = 1,
) -> mf.Manifest:
    """Pack ``source`` into ``root/dataset/version/`` for ``readers`` (ranks x DataLoader workers, see
    ``_batches``); return the published manifest. Raises :class:`PublishedError` when that version is already
    published, DatasetError when the source has fewer samples than the shards the readers need."""
    import webdataset

    for what, name in (("dataset", dataset), ("version", version)):
        if not mf.VERSION_NAME.fullmatch(name):
            raise ValueError(f"{what}: expected letters, digits, '.', '_' or '-' (not leading); got {name!r}")
    source, target = Path(source), Path(root) / dataset / version
    target.mkdir(parents=True, exist_ok=True)
    lock_path = target / ".pack.lock"
    with open(lock_path, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise mf.DatasetError(f"{target}: another packer is writing this version") from None
        try:
            return _pack_locked(webdataset, source, target, dataset, version, files, shard_bytes, readers)
        finally:
            lock_path.unlink(missing_ok=True)  # nothing of the packer stays in the published folder


def _pack_locked(
    webdataset: Any,
    source: Path,
    target: Path,
    dataset: str,
    version: str,
    files: Iterable[str] | None,
    shard_bytes: int,
    readers: int,
) -> mf.Manifest:
    """``pack`` once this process holds the version's lock."""
    if (target / mf.MANIFEST).exists():
        raise PublishedError(f"{target}: version {version} of {dataset} is published (immutable); pack a new one")
    _clean(target)
    items = list(samples(source, files))
    if not items:
        raise mf.DatasetError(f"{source}: no files to pack")
    progress = Progress("pack", len(items), "samples")
    shards = [
        _write_shard(webdataset, target, i, b, progress) for i, b in enumerate(_batches(items, shard_bytes, readers))
    ]
    progress.close()
    fsync_dir(target)
    raw = mf.to_json(dataset, version, shards)
    mf.publish(target, raw)
    return mf.parse(raw, target / mf.MANIFEST)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("pack", help="pack small files into WebDataset shards with a versioned manifest")
    p.add_argument("source", type=Directory("the files to pack"), help="directory holding the files to pack")
    root = OutputDirectory("datasets root", parents=True)
    p.add_argument("--root", type=root, required=True, help="writes ROOT/DATASET/VERSION/")
    p.add_argument("--dataset", type=Name("a dataset name"), required=True, help="dataset name")
    p.add_argument(
        "--version", type=Name("a version"), required=True, help="version to publish (refused if already published)"
    )
    p.add_argument("--files-from", type=File("a list of paths"), help="paths to pack, relative to SOURCE, one a line")
    p.add_argument("--shard-mib", type=Number(0.01, 65536), default=DEFAULT_SHARD_MIB, help="target shard size in MiB")
    p.add_argument(
        "--readers",
        type=Integer(1, 1_000_000),
        default=1,
        help="ranks x DataLoader workers that will read the version: the shard count is a multiple of it",
    )
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    try:
        files = args.files_from.read_text().splitlines() if args.files_from else None
        result = pack(
            args.source,
            args.root,
            args.dataset,
            args.version,
            files=files,
            shard_bytes=int(args.shard_mib * 2**20),
            readers=args.readers,
        )
    except ValueError as e:
        return _fail(1 if isinstance(e, mf.DatasetError) else 2, str(e))
    except OSError as e:
        return _fail(3, f"pack: {e}")
    print(
        f"packed {result.samples} samples into {len(result.shards)} shards: "
        f"{Path(args.root) / args.dataset / args.version} (manifest SHA-256 {result.sha256})"
    )
    return 0


def _fail(status: int, message: str) -> int:
    print(f"pack: {message}", file=sys.stderr)
    return status
