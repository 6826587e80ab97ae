"""Model artifacts: publish a trained model's files as an immutable version in the platform's object store.

``publish(model_dir, name, version)`` writes ``<prefix><name>/<version>/<file>`` for every file under
``model_dir`` and then ``manifest.json``, the way a dataset version is published (``manifest.py``, ``pack.py``):
each file's size and CRC32C are taken from the bytes as they are sent (S3 checks the CRC32C of what it
received), the manifest goes last, and a version whose manifest exists is never written again (the manifest's
PUT is conditional, ``If-None-Match: *``, so of two publishers of one version only one succeeds). Readers take
a version only when its manifest is there and the files match it.

Where: the platform delivers ``artifacts-target`` (endpoint, bucket, prefix ``artifacts/<team>/``) and the keys
to each team (components/teams/artifacts.py); :meth:`Target.from_env` reads them from ``AI_STORAGE_ARTIFACTS_*`` and
the standard AWS variables. Needs boto3 (``pip install ai-storage-training[artifacts]``), imported on use.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import crc32c

from . import manifest as mf
from .pack import PublishedError

FORMAT = "model"
ENDPOINT_VARIABLE, BUCKET_VARIABLE, PREFIX_VARIABLE = (
    "AI_STORAGE_ARTIFACTS_ENDPOINT",
    "AI_STORAGE_ARTIFACTS_BUCKET",
    "AI_STORAGE_ARTIFACTS_PREFIX",
)
PART_BYTES = 256 * 1024 * 1024
"""Files larger than this go up in parts of this size (S3 takes at most 5 GiB in one PUT)."""


@dataclasses.dataclass(frozen=True)
class Target:
    """Where artifacts are published: an S3 endpoint (None: AWS's own), a bucket and a key prefix ending in ``/``."""

    endpoint: str | None
    bucket: str
    prefix: str

    @classmethod
    def from_env(cls) -> Target:
        """The target in ``$AI_STORAGE_ARTIFACTS_ENDPOINT``, ``_BUCKET`` and ``_PREFIX`` (the team's
        ``artifacts-target`` ConfigMap as environment)."""
        bucket, prefix = os.environ.get(BUCKET_VARIABLE, ""), os.environ.get(PREFIX_VARIABLE, "")
        if not bucket or not prefix.endswith("/"):
            raise ValueError(
                f"${BUCKET_VARIABLE} and ${PREFIX_VARIABLE} (ending in '/'): expected the bucket and prefix of the "
                f"team's artifacts-target ConfigMap; got {bucket!r} and {prefix!r}"
            )
        return cls(os.environ.get(ENDPOINT_VARIABLE) or None, bucket, prefix)

    def key(self, name: str, version: str, file: str = "") -> str:
        return f"{self.prefix}{name}/{version}/{file}"


def _files(model_dir: Path) -> list[Path]:
    """The model's files, relative to ``model_dir``, in name order; hidden names are left out."""
    found = [
        p.relative_to(model_dir)
        for p in model_dir.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(model_dir).parts)
    ]
    if not found:
        raise mf.DatasetError(f"{model_dir}: no files to publish")
    if any(p.as_posix() == mf.MANIFEST for p in found):
        raise mf.DatasetError(f"{model_dir}: holds a {mf.MANIFEST} of its own; the publisher writes that name")
    return sorted(found)


def _checksum(crc: int) -> str:
    """A CRC32C as S3's ``x-amz-checksum-crc32c`` header carries it (base64 of the 4 big-endian bytes)."""
    return base64.b64encode(crc.to_bytes(4, "big")).decode()


def _upload(client: Any, bucket: str, key: str, path: Path) -> tuple[int, int]:
    """PUT ``path`` (in parts when large), each request carrying the CRC32C of its bytes; return (size, crc32c)."""
    crc, size = 0, 0
    parts: list[dict[str, Any]] = []
    with open(path, "rb", buffering=0) as f:
        first = f.read(PART_BYTES)
        if len(first) < PART_BYTES:
            crc = crc32c.crc32c(first)
            client.put_object(Bucket=bucket, Key=key, Body=first, ChecksumCRC32C=_checksum(crc))
            return len(first), crc
        upload = client.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32C")["UploadId"]
        try:
            data = first
            while data:
                part_crc = crc32c.crc32c(data)
                crc, size = crc32c.crc32c(data, crc), size + len(data)
                number = len(parts) + 1
                sent = client.upload_part(
                    Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=data,
                    ChecksumCRC32C=_checksum(part_crc),
                )  # fmt: skip
                parts.append({"PartNumber": number, "ETag": sent["ETag"], "ChecksumCRC32C": _checksum(part_crc)})
                data = f.read(PART_BYTES)
            client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": parts})
        except BaseException:
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
            raise
    return size, crc


def publish(
    model_dir: str | os.PathLike[str], name: str, version: str, *, target: Target | None = None, client: Any = None
) -> dict[str, Any]:
    """Publish ``model_dir`` as version ``version`` of model ``name`` under ``target`` (default
    :meth:`Target.from_env`) with ``client`` (default a boto3 S3 client for the target's endpoint); return the
    manifest. Raises :class:`~ai_storage_training.data.pack.PublishedError` when that version is published."""
    for what, value in (("name", name), ("version", version)):
        if not mf.VERSION_NAME.fullmatch(value):
            raise ValueError(f"{what}: expected letters, digits, '.', '_' or '-' (not leading); got {value!r}")
    target = target or Target.from_env()
    if client is None:
        import boto3

        client = boto3.client("s3", endpoint_url=target.endpoint)
    where = f"s3://{target.bucket}/{target.key(name, version)}"
    manifest_key = target.key(name, version, mf.MANIFEST)
    if _exists(client, target.bucket, manifest_key):
        raise PublishedError(f"{where}: version {version} of {name} is published (immutable); publish a new one")
    model_dir = Path(model_dir)
    files = []
    for rel in _files(model_dir):
        size, crc = _upload(client, target.bucket, target.key(name, version, rel.as_posix()), model_dir / rel)
        files.append({"name": rel.as_posix(), "size": size, "crc32c": f"{crc:08x}"})
    body = {"format": FORMAT, "name": name, "version": version, "files": files}
    raw = (json.dumps(body, indent=1) + "\n").encode()
    try:
        client.put_object(
            Bucket=target.bucket,
            Key=manifest_key,
            Body=raw,
            IfNoneMatch="*",
            ChecksumCRC32C=_checksum(crc32c.crc32c(raw)),
        )
    except client.exceptions.ClientError as e:
        if e.response["Error"]["Code"] in ("PreconditionFailed", "ConditionalRequestConflict"):
            raise PublishedError(f"{where}: published by another publisher meanwhile (immutable)") from None
        raise
    return body


def _exists(client: Any, bucket: str, key: str) -> bool:
    try:
        client.head_object(Bucket=bucket, Key=key)
    except client.exceptions.ClientError as e:
        if e.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return True
