"""Bucket: what an object store backend hands to the platform's clients (JuiceFS, Fluid, the backups)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as k8s

from ...common import kube, versions
from ...common.sections import Resources

ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
"""The ServiceAccount annotation EKS reads to give a pod's AWS clients the account's IAM role."""
PREFIX_ANNOTATION = "ai-storage-platform/prefix"
"""Annotation (tag on AWS) of a scope's user, Job or role: the prefix it reaches."""
ACCOUNT_ANNOTATION = "ai-storage-platform/service-account"
"""Annotation (tag on AWS) of a scope's user, Job or role: `namespace/name` of the ServiceAccount it is for."""
PREFIX = re.compile(r"^([a-z0-9][a-z0-9._-]*/)+$")
"""A scope's key prefix: one or more lowercase path segments, each ending in ``/``."""
OBJECT_ACTIONS = [
    "s3:GetObject",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:AbortMultipartUpload",
    "s3:ListMultipartUploadParts",
]
"""What scoped keys may do to the objects under their prefix."""
READ_ACTIONS = ["s3:GetObject"]
"""What read-only scoped keys may do to the objects under their prefix."""
ACCESS_ANNOTATION = "ai-storage-platform/access"
"""Annotation (tag on AWS) of a scope's user, Job or role: `read-write` or `read-only`."""


@dataclass
class ScopedAccess:
    """Credentials that reach only one prefix of the bucket."""

    prefix: str
    """The key prefix the credentials reach, e.g. `checkpoints/vision/`."""
    access_key: pulumi.Output[str]
    """Access key id (secret; empty when ``role_arn`` is set)."""
    secret_key: pulumi.Output[str]
    """Secret access key (secret; empty when ``role_arn`` is set)."""
    role_arn: pulumi.Output[str] | None
    """IAM role for the service account (AWS S3 with `oidcProviderArn`), else None."""


class Scoper(Protocol):
    """A backend's way of creating credentials for one prefix (see ``ObjectStore.scoped_access``)."""

    def __call__(
        self,
        name: str,
        prefix: str,
        service_accounts: Sequence[tuple[str, str]],
        opts: pulumi.ResourceOptions,
        read_only: bool = False,
    ) -> ScopedAccess: ...


def check_prefix(prefix: str) -> str:
    """``prefix`` if it is a scope prefix (``a/`` or ``a/b/``: no wildcard, no leading slash), else ValueError."""
    if not PREFIX.match(prefix):
        raise ValueError(
            f"object-store scope prefix {prefix!r}: expected lowercase path segments each ending in '/' "
            "(e.g. 'checkpoints/vision/'); a prefix without a trailing '/' would also reach its siblings"
        )
    return prefix


def prefix_statements(bucket: str, prefix: str, read_only: bool = False) -> list[dict[str, Any]]:
    """IAM statements that let a principal list, read, write and delete (``read_only``: list and read) only under
    ``prefix`` of ``bucket`` (listing needs an ``s3:prefix`` condition: ListBucket is a bucket action;
    GetBucketLocation lets clients find the bucket's region)."""
    arn = f"arn:aws:s3:::{bucket}"
    actions = READ_ACTIONS if read_only else OBJECT_ACTIONS
    return [
        {"Sid": "ObjectsUnderPrefix", "Effect": "Allow", "Action": actions, "Resource": f"{arn}/{prefix}*"},
        {
            "Sid": "ListUnderPrefix",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": arn,
            "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
        },
        {"Sid": "BucketLocation", "Effect": "Allow", "Action": ["s3:GetBucketLocation"], "Resource": arn},
    ]


def prefix_policy(bucket: str, prefix: str, read_only: bool = False, extra: Sequence[dict[str, Any]] = ()) -> str:
    """The IAM policy document (JSON) of :func:`prefix_statements` (and ``extra`` statements, such as the use of
    the bucket's KMS key): the same for AWS S3 users and roles and for MinIO users."""
    statements = [*prefix_statements(bucket, prefix, read_only), *extra]
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def access(read_only: bool) -> str:
    """The value of :data:`ACCESS_ANNOTATION`."""
    return "read-only" if read_only else "read-write"


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
    """Admin access key id (secret): MinIO's root user, the RGW bucket owner; empty on AWS S3 (no admin key)."""
    secret_key: pulumi.Output[str]
    """Admin secret access key (secret; empty on AWS S3)."""
    scope: Scoper
    """Creates credentials that reach one prefix of the bucket."""


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


def role_account(
    resource_name: str,
    name: str,
    namespace: k8s.core.v1.Namespace | str,
    role_arn: pulumi.Input[str],
    parent: Any,
    after: Sequence[pulumi.Resource] = (),
) -> k8s.core.v1.ServiceAccount:
    """A ServiceAccount ``name`` that carries an IAM role (IRSA): pods that run as it reach the bucket with the
    role, no keys. EKS mounts its web identity token itself, so pods keep no API token."""
    ns = namespace.metadata.name if isinstance(namespace, k8s.core.v1.Namespace) else namespace
    return k8s.core.v1.ServiceAccount(
        resource_name,
        metadata={
            "name": name,
            "namespace": ns,
            "labels": kube.labels(name, "object-store-access"),
            "annotations": {ROLE_ANNOTATION: role_arn},
        },
        automount_service_account_token=False,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
    )
