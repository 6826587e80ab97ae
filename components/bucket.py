"""Bucket: what an object store backend hands to the platform's clients (JuiceFS, Fluid, the backups)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi

from . import kube, versions
from .section import Resources


@dataclass(frozen=True)
class Bucket:
    """Where the bucket is, how JuiceFS names its storage, and the credentials that reach it."""

    storage_type: str
    """JuiceFS storage type (`minio`, or `s3` for AWS S3 and Ceph RGW)."""
    endpoint: pulumi.Output[str]
    """S3 API endpoint URL reachable from the cluster."""
    bucket: pulumi.Output[str]
    """Bucket name."""
    bucket_url: pulumi.Output[str]
    """Bucket URL in the form JuiceFS expects (`<endpoint>/<bucket>` or the virtual-hosted S3 URL)."""
    access_key: pulumi.Output[str]
    """Access key id (secret; empty with IAM roles for service accounts)."""
    secret_key: pulumi.Output[str]
    """Secret access key (secret; empty with IAM roles for service accounts)."""
    role_arn: pulumi.Output[str] | None = None
    """IAM role for service accounts (AWS S3 with `oidcProviderArn` only)."""


def object_url(storage: str, bucket_url: str, prefix: str) -> tuple[str, list[str]]:
    """Where ``juicefs sync`` reaches ``prefix`` of a bucket (a JuiceFS object URL), and the flags it needs."""
    scheme, _, rest = bucket_url.partition("://")
    flags = ["--no-https"] if scheme == "http" else []
    name = "minio" if storage == "minio" else "s3"
    return f"{name}://{rest.rstrip('/')}/{prefix}", flags


def sync_container(
    name: str,
    resources: Resources,
    script: Callable[[list[str]], str],
    target: pulumi.Output[tuple[str, list[str]]],
    env: list[dict[str, Any]],
    mounts: list[dict[str, Any]],
) -> dict[str, Any]:
    """A container of the pinned JuiceFS client that runs ``script(sync flags)`` to copy into the bucket at
    ``target`` (an :func:`object_url`: the destination, in $DESTINATION, and the flags ``juicefs sync`` needs)."""
    return kube.container(
        name,
        versions.JUICEFS_IMAGE,
        resources,
        command=["/bin/sh", "-c", target.apply(lambda t: script(t[1]))],
        # ``env`` first: the destination may refer to its variables as $(NAME).
        env=[{"name": "HOME", "value": "/tmp"}, *env, {"name": "DESTINATION", "value": target.apply(lambda t: t[0])}],
        volumeMounts=[*mounts, kube.TMP_MOUNT],
    )
