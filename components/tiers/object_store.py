"""ObjectStore: the durable cold copy of every dataset, on in-cluster MinIO, AWS S3 or Ceph RGW.

MinIO community edition is frozen (no images after October 2025): it is kept for dev clusters, pinned to
the last published image. AWS S3 (through pulumi-aws) and Ceph RGW (run by RookCeph) are the maintained
backends. Each backend is a module (``minio``, ``s3``, ``ceph_rgw``) that hands back a ``Bucket``; this
component owns the namespace and the admin credentials Secret. Clients get credentials that reach only their
own prefix from :meth:`ObjectStore.scoped_access` (the same IAM policy document on every backend).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..backends.object_stores.bucket import ROLE_ANNOTATION, Bucket, ScopedAccess, check_prefix, object_url
from ..backends.object_stores.ceph_rgw import RgwScopes, rgw_bucket
from ..backends.object_stores.minio import MinioSettings, minio_bucket
from ..backends.object_stores.s3 import S3Settings, s3_bucket
from ..common import kube
from ..common.sections import DnsLabel, Section
from .rook_ceph import RgwGateway


class ObjectStoreSettings(Section):
    """The object store: backend, bucket and backend-specific settings."""

    backend: Literal["minio", "s3", "ceph-rgw"] = "minio"
    """Where objects live: in-cluster MinIO (frozen upstream, for dev), AWS S3, or Ceph RGW (needs rookCeph)."""
    bucket: str = Field("ai-datasets", pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    """Bucket that holds the JuiceFS data (must be globally unique on S3)."""
    namespace: DnsLabel = "object-store"
    """Namespace of the MinIO servers and the credentials Secret."""
    minio: MinioSettings = MinioSettings()
    """MinIO settings (backend `minio`)."""
    s3: S3Settings = S3Settings()
    """AWS S3 settings (backend `s3`)."""


@dataclass
class ObjectStoreArgs:
    """Inputs of an ObjectStore."""

    settings: ObjectStoreSettings
    protect: bool = False
    """Protect and retain the bucket and data volumes."""
    expirations: Mapping[str, int] = field(default_factory=dict)
    """Key prefixes whose objects the bucket deletes after that many days (e.g. metadata backups)."""
    rgw: RgwGateway | None = None
    """The Ceph RGW gateway (backend `ceph-rgw`; RookCeph's `rgw`)."""
    metrics: bool = False
    """Let Prometheus read MinIO's metrics without a token (backend `minio`)."""


class ObjectStore(pulumi.ComponentResource):
    """A bucket with credentials, on MinIO, AWS S3 or Ceph RGW."""

    endpoint: pulumi.Output[str]
    """S3 API endpoint URL reachable from the cluster."""
    bucket: pulumi.Output[str]
    """Bucket name."""
    bucket_url: pulumi.Output[str]
    """Bucket URL in the form JuiceFS expects (`<endpoint>/<bucket>` or the virtual-hosted S3 URL)."""
    storage_type: str
    """JuiceFS storage type for this backend (`minio`, or `s3` for AWS S3 and Ceph RGW)."""
    access_key: pulumi.Output[str]
    """Admin access key id (secret): MinIO's root user, the RGW bucket owner; empty on AWS S3. No client of the
    platform uses it: each gets :meth:`scoped_access`."""
    secret_key: pulumi.Output[str]
    """Admin secret access key (secret; empty on AWS S3)."""
    credentials_secret: pulumi.Output[str]
    """Name of the Kubernetes Secret holding `access-key`, `secret-key`, `endpoint` and `bucket`."""
    scopes: dict[str, ScopedAccess]
    """Every scoped access made so far, by name."""

    def __init__(self, name: str, args: ObjectStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:object_store:ObjectStore", name, None, opts)
        s = args.settings
        self._name = name
        self.scopes = {}
        self._rgw_scopes: RgwScopes | None = None
        ns = kube.namespace(f"{name}-ns", s.namespace, "restricted", self)
        store = self._bucket(name, args, ns)
        self._scope = store.scope
        self.storage_type, self.endpoint, self.bucket = store.storage_type, store.endpoint, store.bucket
        self.bucket_url = store.bucket_url
        self.access_key, self.secret_key = store.access_key, store.secret_key
        secret = k8s.core.v1.Secret(
            f"{name}-credentials",
            metadata={"name": "object-store-credentials", "namespace": ns.metadata.name},
            type="Opaque",
            string_data={
                "access-key": self.access_key,
                "secret-key": self.secret_key,
                "endpoint": self.endpoint,
                "bucket": self.bucket,
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.credentials_secret = secret.metadata.name
        self.register_outputs(
            {
                "endpoint": self.endpoint,
                "bucket": self.bucket,
                "bucket_url": self.bucket_url,
                "credentials_secret": self.credentials_secret,
            }
        )

    def _bucket(self, name: str, args: ObjectStoreArgs, ns: k8s.core.v1.Namespace) -> Bucket:
        """The bucket of the chosen backend (``ceph-rgw`` needs RookCeph's gateway in the args)."""
        s = args.settings
        if s.backend == "minio":
            return minio_bucket(
                name, s.bucket, s.minio, ns, s.namespace, args.protect, args.expirations, self, args.metrics
            )
        if s.backend == "s3":
            return s3_bucket(name, s.bucket, s.s3, args.protect, args.expirations, self)
        if args.rgw is None:
            raise TypeError("ObjectStoreArgs.rgw is required with objectStore.backend ceph-rgw (RookCeph.rgw)")
        bucket, self._rgw_scopes = rgw_bucket(name, s.bucket, args.rgw, args.protect, self)
        return bucket

    def scoped_access(
        self,
        name: str,
        prefix: str,
        service_account: tuple[str, str],
        opts: pulumi.ResourceOptions | None = None,
        *,
        also_trusted: Sequence[tuple[str, str]] = (),
        read_only: bool = False,
    ) -> ScopedAccess:
        """Credentials that list, read, write and delete (``read_only``: list and read) only under ``prefix`` (e.g.
        ``checkpoints/vision/``), for
        the pods of ``service_account`` (namespace, name): on S3 with `oidcProviderArn`, a role only that service
        account (and ``also_trusted``) can assume; otherwise keys, and the service account is only recorded.
        ``name`` (a DNS label, unique per store) names the user, role or Job."""
        check_prefix(prefix)
        if name in self.scopes:
            raise ValueError(f"object-store scope {name!r} exists already (prefix {self.scopes[name].prefix!r})")
        child = pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=self), opts)
        access = self._scope(name, prefix, [service_account, *also_trusted], child, read_only)
        self.scopes[name] = access
        return access

    def deliver(
        self,
        name: str,
        access: ScopedAccess,
        namespace: str,
        names: tuple[str, str, str],
        labels: Mapping[str, str],
        opts: pulumi.ResourceOptions,
    ) -> None:
        """Put scoped ``access`` where a namespace's pods find it. ``names`` = (ServiceAccount, Secret,
        ConfigMap): the ServiceAccount the pods run as (with the IAM role annotation under IRSA), the Secret with
        `access-key` and `secret-key` (none under IRSA), the ConfigMap with `url` and `sync-flags` (the prefix as
        `juicefs sync` names it), `endpoint`, `bucket` and `prefix` (for S3 clients)."""
        account, credentials, target_name = names
        meta: dict[str, Any] = {"name": account, "namespace": namespace, "labels": dict(labels)}
        if access.role_arn is not None:
            meta["annotations"] = {ROLE_ANNOTATION: access.role_arn}
        else:
            k8s.core.v1.Secret(
                f"{name}-credentials",
                metadata={"name": credentials, "namespace": namespace, "labels": dict(labels)},
                type="Opaque",
                string_data={"access-key": access.access_key, "secret-key": access.secret_key},
                opts=opts,
            )
        # EKS mounts the role's web identity token itself: the pods need no API token.
        k8s.core.v1.ServiceAccount(f"{name}-account", metadata=meta, automount_service_account_token=False, opts=opts)
        target = self.bucket_url.apply(lambda url: object_url(self.storage_type, url, access.prefix))
        data = {
            "url": target.apply(lambda t: t[0]),
            "sync-flags": target.apply(lambda t: " ".join(t[1])),
            "endpoint": self.endpoint,
            "bucket": self.bucket,
            "prefix": access.prefix,
        }
        meta = {"name": target_name, "namespace": namespace, "labels": dict(labels)}
        k8s.core.v1.ConfigMap(f"{name}-target", metadata=meta, data=data, opts=opts)

    def finish(self) -> None:
        """Write what needs every scope at once (the ceph-rgw bucket policy); call after the last scoped_access."""
        if self._rgw_scopes is not None:
            self._rgw_scopes.bucket_claim()
