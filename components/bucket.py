"""Bucket: what an object store backend hands to the platform's clients (JuiceFS, Fluid, the backups)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi


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
