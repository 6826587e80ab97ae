"""Ceph RGW: the object store backend on the RGW gateway that RookCeph runs (maintained, in-cluster).

The access keys are generated here and handed to a CephObjectStoreUser through a Secret this package owns
(its ``spec.keys``), so they are Pulumi outputs, not values read back from the cluster (an
ObjectBucketClaim's generated keys could not be).

Scoped access: each scope is a CephObjectStoreUser of its own (keys generated the same way) that owns no
bucket, so by itself it reaches nothing. The bucket is claimed by an ObjectBucketClaim owned by the
``juicefs`` user (``bucketOwner``), whose ``bucketPolicy`` grants each scope's user the prefix statements
(the same IAM statements as AWS S3 and MinIO, with the user as ``Principal``). A bucket has one policy, so it
is written once every scope is known (:meth:`RgwScopes.bucket_claim`); Rook applies it only when its operator
allows the ``bucketPolicy`` and ``bucketOwner`` fields (``obcAllowAdditionalConfigFields``, set by RookCeph).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from ...common import kube
from .bucket import (
    ACCESS_ANNOTATION,
    ACCOUNT_ANNOTATION,
    PREFIX_ANNOTATION,
    Bucket,
    ScopedAccess,
    access,
    prefix_statements,
)

RGW_USER = "juicefs"
"""CephObjectStoreUser of the `ceph-rgw` backend; it owns the bucket."""
OBC_API = "objectbucket.io/v1alpha1"
API = "ceph.rook.io/v1"
"""Rook's API group and version: the CephObjectStoreUsers here, and every Ceph custom resource RookCeph makes."""


@dataclass(frozen=True)
class RgwGateway:
    """What an object store backend needs from the RGW that RookCeph runs."""

    namespace: str
    store: str
    endpoint: str
    depends_on: list[pulumi.Resource]
    """The CephObjectStore and the release installing its CRDs."""


def user_spec(
    store: str, keys_secret: str, display_name: str = "JuiceFS data of the AI storage platform"
) -> dict[str, object]:
    """The CephObjectStoreUser's ``spec``: a user of ``store`` whose keys come from ``keys_secret``."""
    return {
        "store": store,
        "displayName": display_name,
        "keys": [
            {
                "accessKeyRef": {"name": keys_secret, "key": "access-key"},
                "secretKeyRef": {"name": keys_secret, "key": "secret-key"},
            }
        ],
    }


def bucket_policy(bucket: str, scopes: Sequence[tuple[str, str, bool]]) -> str:
    """The bucket policy (JSON) that grants each ``(user, prefix, read_only)`` scope the prefix statements, the
    user as ``Principal`` (RGW names a user of the default tenant ``arn:aws:iam:::user/<uid>``)."""
    statements = []
    for user, prefix, read_only in scopes:
        for statement in prefix_statements(bucket, prefix, read_only):
            sid = f"{statement['Sid']}{''.join(part.capitalize() for part in user.split('-'))}"
            principal = {"AWS": [f"arn:aws:iam:::user/{user}"]}
            statements.append({**statement, "Sid": sid, "Principal": principal})
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, sort_keys=True)


def bucket_claim_spec(bucket: str, storage_class: str, policy: str | None) -> dict[str, object]:
    """The ObjectBucketClaim's ``spec``: ``bucket`` owned by the ``juicefs`` user, with ``policy`` if any."""
    config = {"bucketOwner": RGW_USER, **({"bucketPolicy": policy} if policy else {})}
    return {"bucketName": bucket, "storageClassName": storage_class, "additionalConfig": config}


def _keys(
    name: str, secret_name: str, namespace: str, opts: pulumi.ResourceOptions
) -> tuple[pulumi.Output[str], pulumi.Output[str], k8s.core.v1.Secret]:
    """Generated RGW keys, and the Secret a CephObjectStoreUser reads them from."""
    access = random.RandomString(f"{name}-access-key", length=20, special=False, lower=False, opts=opts)
    secret = random.RandomPassword(f"{name}-secret-key", length=40, special=False, opts=opts)
    access_key: pulumi.Output[str] = pulumi.Output.secret(access.result)
    keys = k8s.core.v1.Secret(
        f"{name}-keys",
        metadata={"name": secret_name, "namespace": namespace},
        type="Opaque",
        string_data={"access-key": access_key, "secret-key": secret.result},
        opts=opts,
    )
    return access_key, pulumi.Output.secret(secret.result), keys


@dataclass
class RgwScopes:
    """The scoped users of the RGW backend and the bucket policy that grants them their prefixes."""

    name: str
    bucket: str
    rgw: RgwGateway
    protect: bool
    parent: pulumi.Resource
    owner: pulumi.Resource
    """The bucket owner's CephObjectStoreUser."""
    scopes: list[tuple[str, str, bool]] = field(default_factory=list)
    """(RGW user, prefix, read-only) of every scope so far."""
    sealed: bool = False

    def scope(
        self,
        name: str,
        prefix: str,
        service_accounts: Sequence[tuple[str, str]],
        opts: pulumi.ResourceOptions,
        read_only: bool = False,
    ) -> ScopedAccess:
        """A CephObjectStoreUser ``scope-<name>`` with generated keys; the bucket policy grants it ``prefix``."""
        if self.sealed:
            raise RuntimeError(f"scope {name!r} asked for after the ceph-rgw bucket policy was written")
        user = f"scope-{name}"
        access_key, secret_key, keys = _keys(f"{self.name}-{name}-rgw", f"rgw-{user}-keys", self.rgw.namespace, opts)
        ns, account = service_accounts[0]
        k8s.apiextensions.CustomResource(
            f"{self.name}-{name}-rgw-user",
            api_version=API,
            kind="CephObjectStoreUser",
            metadata={
                "name": user,
                "namespace": self.rgw.namespace,
                "annotations": {
                    PREFIX_ANNOTATION: prefix,
                    ACCOUNT_ANNOTATION: f"{ns}/{account}",
                    ACCESS_ANNOTATION: access(read_only),
                },
            },
            spec=user_spec(self.rgw.store, f"rgw-{user}-keys", f"Scope {prefix} of the AI storage platform"),
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[*self.rgw.depends_on, keys])),
        )
        self.scopes.append((user, prefix, read_only))
        return ScopedAccess(prefix, access_key, secret_key, None)

    def bucket_claim(self) -> None:
        """The bucket's StorageClass and ObjectBucketClaim with the policy of every scope (once, at the end)."""
        self.sealed = True
        child = pulumi.ResourceOptions(parent=self.parent)
        class_name = f"{self.rgw.store}-bucket"
        storage_class = k8s.storage.v1.StorageClass(
            f"{self.name}-rgw-bucket-class",
            metadata={"name": class_name, "labels": kube.labels("ceph-rgw", "bucket")},
            provisioner=f"{self.rgw.namespace}.ceph.rook.io/bucket",
            reclaim_policy="Retain",
            parameters={"objectStoreName": self.rgw.store, "objectStoreNamespace": self.rgw.namespace},
            opts=child,
        )
        k8s.apiextensions.CustomResource(
            f"{self.name}-rgw-bucket-claim",
            api_version=OBC_API,
            kind="ObjectBucketClaim",
            metadata={"name": self.bucket, "namespace": self.rgw.namespace},
            spec=bucket_claim_spec(
                self.bucket, class_name, bucket_policy(self.bucket, self.scopes) if self.scopes else None
            ),
            opts=kube.stateful(self.parent, self.protect, depends_on=[storage_class, self.owner, *self.rgw.depends_on]),
        )


def rgw_bucket(
    name: str, bucket: str, rgw: RgwGateway, protect: bool, parent: pulumi.Resource
) -> tuple[Bucket, RgwScopes]:
    """The bucket owner (a user on the RGW with generated keys) and the scoped users; the bucket itself is
    claimed by :meth:`RgwScopes.bucket_claim` once every scope is known."""
    child = pulumi.ResourceOptions(parent=parent)
    access_key, secret_key, keys = _keys(f"{name}-rgw", f"rgw-{RGW_USER}-keys", rgw.namespace, child)
    owner = k8s.apiextensions.CustomResource(
        f"{name}-rgw-user",
        api_version=API,
        kind="CephObjectStoreUser",
        metadata={"name": RGW_USER, "namespace": rgw.namespace},
        spec=user_spec(rgw.store, f"rgw-{RGW_USER}-keys"),
        opts=kube.stateful(parent, protect, depends_on=[*rgw.depends_on, keys]),
    )
    scopes = RgwScopes(name, bucket, rgw, protect, parent, owner)
    return Bucket(
        scope=scopes.scope,
        storage_type="s3",
        endpoint=pulumi.Output.from_input(rgw.endpoint),
        bucket=pulumi.Output.from_input(bucket),
        bucket_url=pulumi.Output.from_input(f"{rgw.endpoint}/{bucket}"),
        access_key=access_key,
        secret_key=secret_key,
    ), scopes
