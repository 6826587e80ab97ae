"""ObjectStore: the durable cold copy of every dataset, in-cluster MinIO, AWS S3 or Ceph RGW.

MinIO community edition is frozen (no images after October 2025): it is kept for dev clusters, pinned to
the last published image. AWS S3 (through pulumi-aws) and Ceph RGW (run by RookCeph) are the maintained
backends. On RGW the access keys are generated here and handed to a CephObjectStoreUser through a Secret
this package owns (its ``spec.keys``), so they are Pulumi outputs, not values read back from the cluster
(an ObjectBucketClaim's generated keys could not be); JuiceFS creates the bucket on first format.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from . import kube, versions
from .rook_ceph import RgwGateway
from .settings import DnsLabel, Quantity, Resources, Section

RGW_USER = "juicefs"
"""CephObjectStoreUser of the `ceph-rgw` backend."""
ROOT_DIR = "/run/secrets/minio-root"
"""Where MinIO and the bucket Job read the root credentials (files, not environment variables)."""
ROOT_MOUNT = {"name": "root-credentials", "mountPath": ROOT_DIR, "readOnly": True}
ROOT_VOLUME = {"name": "root-credentials", "secret": {"secretName": "minio-root"}}


class MinioSettings(Section):
    """The in-cluster MinIO StatefulSet."""

    replicas: int = Field(1, ge=1, le=16)
    """MinIO servers; 1 for a single drive, 4 or more for erasure-coded distributed mode."""

    @field_validator("replicas")
    @classmethod
    def _erasure_set(cls, value: int) -> int:
        if value in (2, 3):
            raise PydanticCustomError("minio_replicas", "expected 1, or 4 to 16 (distributed MinIO needs 4 drives)")
        return value

    storage_size: Quantity = "50Gi"
    """Size of each server's data PVC."""
    storage_class: str | None = None
    """StorageClass for the data PVCs; unset uses the cluster default."""
    resources: Resources = Resources(memory_request="512Mi", memory_limit="2Gi", cpu_request="250m")
    """Requests and limits of each MinIO server."""


class S3Settings(Section):
    """The AWS S3 bucket and how the cluster reaches it."""

    region: str = "us-east-1"
    """AWS region of the bucket (also set `aws:region` for the provider)."""
    cold_storage_class: Literal["STANDARD_IA", "INTELLIGENT_TIERING", "GLACIER_IR", "ONEZONE_IA"] = "STANDARD_IA"
    """S3 storage class objects move to after `transitionDays`."""
    transition_days: int = Field(30, ge=1, le=3650)
    """Days after creation before objects move to the colder storage class."""
    noncurrent_version_days: int = Field(30, ge=1, le=3650)
    """Days a replaced (noncurrent) object version is kept before it expires."""
    oidc_provider_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:oidc-provider/.+$")
    """EKS OIDC provider ARN; when set, access is through an IAM role for service accounts, not an access key."""
    service_accounts: list[str] = ["juicefs-csi:juicefs-csi-controller-sa", "juicefs-csi:juicefs-csi-node-sa"]
    """`namespace:name` service accounts the IAM role trusts (only with `oidcProviderArn`)."""


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
    """The Ceph RGW gateway (backend `ceph-rgw`)."""


def minio_lifecycle(expirations: Mapping[str, int]) -> str:
    """The bucket lifecycle document ``mc ilm import`` applies (it replaces the whole configuration)."""
    rules = [
        {
            "ID": f"expire-{prefix.strip('/')}",
            "Status": "Enabled",
            "Filter": {"Prefix": prefix},
            "Expiration": {"Days": days},
        }
        for prefix, days in sorted(expirations.items())
    ]
    return json.dumps({"Rules": rules}, sort_keys=True)


class ObjectStore(pulumi.ComponentResource):
    """A bucket with credentials, on MinIO or AWS S3."""

    endpoint: pulumi.Output[str]
    """S3 API endpoint URL reachable from the cluster."""
    bucket: pulumi.Output[str]
    """Bucket name."""
    bucket_url: pulumi.Output[str]
    """Bucket URL in the form JuiceFS expects (`<endpoint>/<bucket>` or the virtual-hosted S3 URL)."""
    storage_type: str
    """JuiceFS storage type for this backend (`minio`, or `s3` for AWS S3 and Ceph RGW)."""
    access_key: pulumi.Output[str]
    """Access key id (secret; empty when IAM roles for service accounts are used)."""
    secret_key: pulumi.Output[str]
    """Secret access key (secret; empty when IAM roles for service accounts are used)."""
    credentials_secret: pulumi.Output[str]
    """Name of the Kubernetes Secret holding `access-key`, `secret-key`, `endpoint` and `bucket`."""
    role_arn: pulumi.Output[str] | None = None
    """IAM role for service accounts (S3 with `oidcProviderArn` only)."""

    def __init__(self, name: str, args: ObjectStoreArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:object_store:ObjectStore", name, None, opts)
        s = args.settings
        self._ns = kube.namespace(f"{name}-ns", s.namespace, "restricted", self)
        if s.backend == "minio":
            self._minio(name, s, args.protect, args.expirations)
        elif s.backend == "ceph-rgw":
            if args.rgw is None:
                raise ValueError("objectStore backend ceph-rgw needs the RGW gateway of RookCeph")
            self._ceph_rgw(name, s, args.protect, args.rgw)
        else:
            self._s3(name, s, args.protect, args.expirations)
        secret = k8s.core.v1.Secret(
            f"{name}-credentials",
            metadata={"name": "object-store-credentials", "namespace": self._ns.metadata.name},
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

    def _minio(self, name: str, s: ObjectStoreSettings, protect: bool, expirations: Mapping[str, int]) -> None:
        m = s.minio
        ns = s.namespace
        user = random.RandomString(
            f"{name}-root-user", length=12, special=False, upper=False, opts=pulumi.ResourceOptions(parent=self)
        )
        password = random.RandomPassword(
            f"{name}-root-password", length=40, special=False, opts=pulumi.ResourceOptions(parent=self)
        )
        self.storage_type = "minio"
        self.access_key = pulumi.Output.secret(user.result)
        self.secret_key = password.result
        root = k8s.core.v1.Secret(
            f"{name}-root",
            metadata={"name": "minio-root", "namespace": self._ns.metadata.name},
            type="Opaque",
            string_data={"MINIO_ROOT_USER": self.access_key, "MINIO_ROOT_PASSWORD": self.secret_key},
            opts=pulumi.ResourceOptions(parent=self),
        )
        labels = kube.labels("minio", "object-store")
        headless = k8s.core.v1.Service(
            f"{name}-headless",
            metadata={"name": "minio-hl", "namespace": self._ns.metadata.name, "labels": labels},
            spec={
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": labels,
                "ports": [{"name": "s3", "port": 9000, "targetPort": 9000}],
            },
            opts=pulumi.ResourceOptions(parent=self),
        )
        service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={"name": "minio", "namespace": self._ns.metadata.name, "labels": labels},
            spec={"selector": labels, "ports": [{"name": "s3", "port": 9000, "targetPort": 9000}]},
            opts=pulumi.ResourceOptions(parent=self),
        )
        if m.replicas == 1:
            server_args = ["server", "/data", "--console-address", ":9001"]
        else:
            hosts = f"http://minio-{{0...{m.replicas - 1}}}.minio-hl.{ns}.svc.cluster.local/data"
            server_args = ["server", hosts, "--console-address", ":9001"]
        probe = {"httpGet": {"path": "/minio/health/live", "port": 9000}, "periodSeconds": 15}
        policy = kube.ingress_policy(f"{name}-network-policy", self._ns.metadata.name, labels, [9000], self)
        statefulset = k8s.apps.v1.StatefulSet(
            f"{name}-minio",
            metadata={
                "name": "minio",
                "namespace": self._ns.metadata.name,
                "labels": labels,
                "annotations": kube.checkov_skips(m.resources),
            },
            spec={
                "serviceName": "minio-hl",
                "replicas": m.replicas,
                "podManagementPolicy": "Parallel",
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "securityContext": kube.restricted_pod(kube.UID),
                        "automountServiceAccountToken": False,
                        "containers": [
                            {
                                "name": "minio",
                                "image": versions.MINIO_IMAGE,
                                "imagePullPolicy": "Always",
                                "args": server_args,
                                "env": [
                                    {"name": "HOME", "value": "/tmp"},
                                    {"name": "MINIO_ROOT_USER_FILE", "value": f"{ROOT_DIR}/MINIO_ROOT_USER"},
                                    {"name": "MINIO_ROOT_PASSWORD_FILE", "value": f"{ROOT_DIR}/MINIO_ROOT_PASSWORD"},
                                ],
                                "ports": [
                                    {"name": "s3", "containerPort": 9000},
                                    {"name": "console", "containerPort": 9001},
                                ],
                                "resources": m.resources.spec(),
                                "securityContext": kube.restricted_container(kube.UID),
                                "livenessProbe": probe,
                                "readinessProbe": {**probe, "httpGet": {"path": "/minio/health/ready", "port": 9000}},
                                "volumeMounts": [
                                    {"name": "data", "mountPath": "/data"},
                                    {"name": "tmp", "mountPath": "/tmp"},
                                    ROOT_MOUNT,
                                ],
                            }
                        ],
                        "volumes": [{"name": "tmp", "emptyDir": {}}, ROOT_VOLUME],
                    },
                },
                "volumeClaimTemplates": [kube.data_claim_template(m.storage_size, m.storage_class)],
            },
            opts=kube.stateful(self, protect, depends_on=[root, headless, policy]),
        )
        self.endpoint = pulumi.Output.concat("http://minio.", ns, ".svc.cluster.local:9000")
        self.bucket = pulumi.Output.from_input(s.bucket)
        self.bucket_url = pulumi.Output.concat(self.endpoint, "/", s.bucket)
        job_labels = kube.labels("minio-bucket", "object-store")
        job_policy = kube.ingress_policy(f"{name}-bucket-network-policy", self._ns.metadata.name, job_labels, [], self)
        job_resources = Resources(memory_limit="128Mi", memory_request="64Mi", cpu_request="50m", cpu_limit="500m")
        k8s.batch.v1.Job(
            f"{name}-bucket",
            metadata={
                "name": f"minio-bucket-{s.bucket}"[:63],
                "namespace": self._ns.metadata.name,
                "annotations": kube.checkov_skips(job_resources),
            },
            spec={
                "backoffLimit": 10,
                "template": {
                    "metadata": {"labels": job_labels},
                    "spec": {
                        "restartPolicy": "OnFailure",
                        "automountServiceAccountToken": False,
                        "securityContext": kube.restricted_pod(kube.UID),
                        "containers": [
                            {
                                "name": "mc",
                                "image": versions.MINIO_CLIENT_IMAGE,
                                "imagePullPolicy": "Always",
                                "command": ["/bin/sh", "-ec"],
                                "args": [
                                    f'mc alias set store "$ENDPOINT" "$(cat {ROOT_DIR}/MINIO_ROOT_USER)" '
                                    f'"$(cat {ROOT_DIR}/MINIO_ROOT_PASSWORD)"\n'
                                    'mc mb --ignore-existing "store/$BUCKET"\n'
                                    + (
                                        'printf %s "$LIFECYCLE" | mc ilm import "store/$BUCKET"\n'
                                        if expirations
                                        else ""
                                    )
                                ],
                                "env": [
                                    {"name": "MC_CONFIG_DIR", "value": "/tmp/mc"},
                                    {"name": "ENDPOINT", "value": f"http://minio.{ns}.svc:9000"},
                                    {"name": "BUCKET", "value": s.bucket},
                                    {"name": "LIFECYCLE", "value": minio_lifecycle(expirations)},
                                ],
                                "resources": job_resources.spec(),
                                "securityContext": kube.restricted_container(kube.UID),
                                "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, ROOT_MOUNT],
                            }
                        ],
                        "volumes": [{"name": "tmp", "emptyDir": {}}, ROOT_VOLUME],
                    },
                },
            },
            opts=pulumi.ResourceOptions(parent=self, depends_on=[statefulset, service, job_policy]),
        )

    def _ceph_rgw(self, name: str, s: ObjectStoreSettings, protect: bool, rgw: RgwGateway) -> None:
        child = pulumi.ResourceOptions(parent=self)
        access = random.RandomString(f"{name}-rgw-access-key", length=20, special=False, lower=False, opts=child)
        secret = random.RandomPassword(f"{name}-rgw-secret-key", length=40, special=False, opts=child)
        self.access_key = pulumi.Output.secret(access.result)
        self.secret_key = secret.result
        keys_name = f"rgw-{RGW_USER}-keys"
        keys = k8s.core.v1.Secret(
            f"{name}-rgw-keys",
            metadata={"name": keys_name, "namespace": rgw.namespace},
            type="Opaque",
            string_data={"access-key": self.access_key, "secret-key": self.secret_key},
            opts=child,
        )
        k8s.apiextensions.CustomResource(
            f"{name}-rgw-user",
            api_version="ceph.rook.io/v1",
            kind="CephObjectStoreUser",
            metadata={"name": RGW_USER, "namespace": rgw.namespace},
            spec={
                "store": rgw.store,
                "displayName": "JuiceFS data of the AI storage platform",
                "keys": [
                    {
                        "accessKeyRef": {"name": keys_name, "key": "access-key"},
                        "secretKeyRef": {"name": keys_name, "key": "secret-key"},
                    }
                ],
            },
            opts=kube.stateful(self, protect, depends_on=[*rgw.depends_on, keys]),
        )
        self.storage_type = "s3"
        self.endpoint = pulumi.Output.from_input(rgw.endpoint)
        self.bucket = pulumi.Output.from_input(s.bucket)
        self.bucket_url = pulumi.Output.from_input(f"{rgw.endpoint}/{s.bucket}")

    def _s3(self, name: str, s: ObjectStoreSettings, protect: bool, expirations: Mapping[str, int]) -> None:
        import pulumi_aws as aws  # only stacks that use S3 pay for importing pulumi-aws

        c = s.s3
        child = pulumi.ResourceOptions(parent=self)
        bucket = aws.s3.Bucket(f"{name}-bucket", bucket=s.bucket, opts=kube.stateful(self, protect))
        aws.s3.BucketVersioning(
            f"{name}-versioning",
            bucket=bucket.id,
            versioning_configuration={"status": "Enabled"},
            opts=child,
        )
        aws.s3.BucketServerSideEncryptionConfiguration(
            f"{name}-encryption",
            bucket=bucket.id,
            rules=[
                {"apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms"}, "bucket_key_enabled": True}
            ],
            opts=child,
        )
        aws.s3.BucketPublicAccessBlock(
            f"{name}-public-access-block",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        aws.s3.BucketLifecycleConfiguration(
            f"{name}-lifecycle",
            bucket=bucket.id,
            rules=[
                {
                    "id": "cold-tier",
                    "status": "Enabled",
                    "filter": {"prefix": ""},
                    "transitions": [{"days": c.transition_days, "storage_class": c.cold_storage_class}],
                    "noncurrent_version_expiration": {"noncurrent_days": c.noncurrent_version_days},
                    "abort_incomplete_multipart_upload": {"days_after_initiation": 7},
                },
                *(
                    {
                        "id": f"expire-{prefix.strip('/')}",
                        "status": "Enabled",
                        "filter": {"prefix": prefix},
                        "expiration": {"days": days},
                    }
                    for prefix, days in sorted(expirations.items())
                ),
            ],
            opts=child,
        )
        policy = bucket.arn.apply(
            lambda arn: json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"], "Resource": arn},
                        {
                            "Effect": "Allow",
                            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                            "Resource": f"{arn}/*",
                        },
                    ],
                }
            )
        )
        if c.oidc_provider_arn:
            issuer = c.oidc_provider_arn.split(":oidc-provider/", 1)[1]
            subjects = [f"system:serviceaccount:{sa}" for sa in c.service_accounts]
            trust = json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Federated": c.oidc_provider_arn},
                            "Action": "sts:AssumeRoleWithWebIdentity",
                            "Condition": {
                                "StringEquals": {f"{issuer}:sub": subjects, f"{issuer}:aud": "sts.amazonaws.com"}
                            },
                        }
                    ],
                }
            )
            role = aws.iam.Role(f"{name}-role", assume_role_policy=trust, opts=child)
            aws.iam.RolePolicy(f"{name}-role-policy", role=role.id, policy=policy, opts=child)
            self.role_arn = role.arn
            self.access_key = pulumi.Output.secret("")
            self.secret_key = pulumi.Output.secret("")
        else:
            user = aws.iam.User(f"{name}-user", name=f"{s.bucket}-juicefs", opts=child)
            aws.iam.UserPolicy(f"{name}-user-policy", user=user.name, policy=policy, opts=child)
            key = aws.iam.AccessKey(f"{name}-access-key", user=user.name, opts=child)
            self.access_key = pulumi.Output.secret(key.id)
            self.secret_key = pulumi.Output.secret(key.secret)
        self.storage_type = "s3"
        self.endpoint = pulumi.Output.from_input(f"https://s3.{c.region}.amazonaws.com")
        self.bucket = bucket.bucket
        self.bucket_url = bucket.bucket.apply(lambda b: f"https://{b}.s3.{c.region}.amazonaws.com")
