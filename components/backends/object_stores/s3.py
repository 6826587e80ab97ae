"""AWS S3: the maintained object store backend for cloud stacks, through pulumi-aws.

The bucket is versioned, encrypted with SSE-KMS, closed to the public, and moves objects to a colder storage
class after a while. There are no admin credentials: each client of the bucket gets a scope (one prefix),
an IAM role for its service account when the stack names its EKS OIDC provider, else an IAM user's access
key.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

import pulumi
from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from ...common import kube
from ...common.sections import KmsKeyArn, Problem, Section, SettingsError
from .bucket import (
    ACCESS_ANNOTATION,
    ACCOUNT_ANNOTATION,
    PREFIX_ANNOTATION,
    Bucket,
    ScopedAccess,
    Scoper,
    access,
    prefix_policy,
)

_SERVICE_ACCOUNT = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?:[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")


def _service_account(value: str) -> str:
    if not _SERVICE_ACCOUNT.match(value):
        raise PydanticCustomError(
            "service_account", "expected `namespace:name` of a ServiceAccount, e.g. juicefs-csi:juicefs-csi-node-sa"
        )
    return value


ServiceAccountRef = Annotated[str, AfterValidator(_service_account)]
"""`namespace:name` of a ServiceAccount."""


class S3Settings(Section):
    """The AWS S3 bucket and how the cluster reaches it."""

    region: str = "us-east-1"
    """AWS region of the bucket: the provider's `aws:region` when the stack sets that (this key must then match)."""
    cold_storage_class: Literal["STANDARD_IA", "INTELLIGENT_TIERING", "GLACIER_IR", "ONEZONE_IA"] = "STANDARD_IA"
    """S3 storage class the objects under `archivePrefixes` move to after `transitionDays`."""
    transition_days: int = Field(30, ge=1, le=3650)
    """Days after creation before the objects under `archivePrefixes` move to the colder storage class."""
    archive_prefixes: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*/$")]] = []
    """Prefixes whose objects move to `coldStorageClass` (e.g. `artifacts/`); empty: nothing moves. Never the
    JuiceFS volume's blocks: every epoch would pay retrieval fees and JuiceFS's compaction early-deletion charges."""
    noncurrent_version_days: int = Field(30, ge=1, le=3650)
    """Days a replaced (noncurrent) object version is kept before it expires."""
    kms_key_arn: KmsKeyArn | None = None
    """Customer-managed KMS key of the bucket's default encryption (SSE-KMS, with an S3 bucket key); unset: the
    AWS-managed key `aws/s3`. Every scope's role or user may use only this key (`kms:Decrypt`, and
    `kms:GenerateDataKey` when it writes): the key's policy must let the account's IAM grant it. Another key later
    leaves every object written before unreadable to the scopes (the diff blocks it)."""
    oidc_provider_arn: str | None = Field(None, pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:oidc-provider/.+$")
    """EKS OIDC provider ARN; when set, access is through an IAM role for service accounts, not an access key."""
    service_accounts: list[ServiceAccountRef] = []
    """Further `namespace:name` accounts the JuiceFS volume's IAM role trusts (it always trusts the CSI driver's)."""


def with_provider_region(config: dict[str, Any], aws_region: str | None) -> dict[str, Any]:
    """The platform's stack config with `objectStore.s3.region` taken from the AWS provider's `aws:region` unless
    the stack sets it; SettingsError when both are set and differ (the provider creates the bucket in its own
    region, so the endpoint would name the wrong one)."""
    if not aws_region:
        return config
    store: dict[str, Any] = config.get("objectStore") or {}
    s3: dict[str, Any] = store.get("s3") or {} if isinstance(store, dict) else {}
    if not isinstance(store, dict) or not isinstance(s3, dict):
        return config  # not a mapping: validation names it
    given = s3.get("region")
    if given is not None and given != aws_region:
        hint = "the AWS provider creates the bucket in aws:region: set the two alike, or leave objectStore.s3.region"
        raise SettingsError([Problem("objectStore.s3.region", f"expected aws:region's {aws_region!r}", given, hint)])
    return {**config, "objectStore": {**store, "s3": {**s3, "region": aws_region}}}


def lifecycle_rules(c: S3Settings, expirations: Mapping[str, int]) -> list[dict[str, Any]]:
    """The bucket's lifecycle: for everything, noncurrent versions expire and stale multipart uploads are aborted
    (no transition: JuiceFS reads and compacts its blocks at any age); the archive prefixes move to the cold
    storage class; the expiry of each prefix given."""
    every = {
        "id": "every-object",
        "status": "Enabled",
        "filter": {"prefix": ""},
        "noncurrent_version_expiration": {"noncurrent_days": c.noncurrent_version_days},
        "abort_incomplete_multipart_upload": {"days_after_initiation": 7},
    }
    archives = [
        {
            "id": f"archive-{prefix.strip('/').replace('/', '-')}",
            "status": "Enabled",
            "filter": {"prefix": prefix},
            "transitions": [{"days": c.transition_days, "storage_class": c.cold_storage_class}],
        }
        for prefix in sorted(c.archive_prefixes)
    ]
    expiries = [
        {
            "id": f"expire-{prefix.strip('/')}",
            "status": "Enabled",
            "filter": {"prefix": prefix},
            "expiration": {"days": d},
        }
        for prefix, d in sorted(expirations.items())
    ]
    return [every, *archives, *expiries]


def trust_policy(provider_arn: str, service_accounts: Sequence[str]) -> str:
    """The role's trust policy: the named ``namespace:name`` service accounts, through the cluster's OIDC
    provider (and no one else: ``sub`` and ``aud`` must both match)."""
    issuer = provider_arn.split(":oidc-provider/", 1)[1]
    subjects = [f"system:serviceaccount:{sa}" for sa in service_accounts]
    condition = {"StringEquals": {f"{issuer}:sub": subjects, f"{issuer}:aud": "sts.amazonaws.com"}}
    statement = {
        "Effect": "Allow",
        "Principal": {"Federated": provider_arn},
        "Action": "sts:AssumeRoleWithWebIdentity",
        "Condition": condition,
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def sse_default(c: S3Settings) -> dict[str, str]:
    """The bucket's default encryption: SSE-KMS with the stack's key, or the AWS-managed one."""
    return {"sse_algorithm": "aws:kms", **({"kms_master_key_id": c.kms_key_arn} if c.kms_key_arn else {})}


def key_statement(key_arn: str, read_only: bool) -> dict[str, Any]:
    """What a scope needs of the bucket's customer-managed key: decrypt what it reads, and make data keys to write."""
    actions = ["kms:Decrypt"] if read_only else ["kms:Decrypt", "kms:GenerateDataKey"]
    return {"Effect": "Allow", "Action": actions, "Resource": key_arn}


def s3_bucket(
    name: str, bucket_name: str, c: S3Settings, protect: bool, expirations: Mapping[str, int], parent: pulumi.Resource
) -> Bucket:
    """A versioned, encrypted, private bucket with its lifecycle, and the IAM access to it."""
    import pulumi_aws as aws  # only stacks that use S3 pay for importing pulumi-aws

    child = pulumi.ResourceOptions(parent=parent)
    bucket = aws.s3.Bucket(f"{name}-bucket", bucket=bucket_name, opts=kube.stateful(parent, protect))
    aws.s3.BucketVersioning(
        f"{name}-versioning", bucket=bucket.id, versioning_configuration={"status": "Enabled"}, opts=child
    )
    aws.s3.BucketServerSideEncryptionConfiguration(
        f"{name}-encryption",
        bucket=bucket.id,
        rules=[{"apply_server_side_encryption_by_default": sse_default(c), "bucket_key_enabled": True}],
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
        f"{name}-lifecycle", bucket=bucket.id, rules=lifecycle_rules(c, expirations), opts=child
    )
    # No admin credentials: nothing in the cluster needs the whole bucket; every client gets a scope.
    return Bucket(
        scope=s3_scoper(name, bucket, c),
        storage_type="s3",
        endpoint=pulumi.Output.from_input(f"https://s3.{c.region}.amazonaws.com"),
        bucket=bucket.bucket,
        bucket_url=bucket.bucket.apply(lambda b: f"https://{b}.s3.{c.region}.amazonaws.com"),
        access_key=pulumi.Output.secret(""),
        secret_key=pulumi.Output.secret(""),
    )


def s3_scoper(store: str, bucket: Any, c: S3Settings) -> Scoper:
    """Credentials for one prefix of ``bucket``: with `oidcProviderArn` an IAM role that only the given service
    accounts can assume (no keys), else an IAM user with an access key; both carry the prefix policy."""
    import pulumi_aws as aws

    def scope(
        name: str,
        prefix: str,
        service_accounts: Sequence[tuple[str, str]],
        opts: pulumi.ResourceOptions,
        read_only: bool = False,
    ) -> ScopedAccess:
        kms = [key_statement(c.kms_key_arn, read_only)] if c.kms_key_arn else []
        policy = bucket.bucket.apply(lambda b: prefix_policy(b, prefix, read_only, kms))
        accounts = [f"{ns}:{sa}" for ns, sa in service_accounts]
        tags = {PREFIX_ANNOTATION: prefix, ACCOUNT_ANNOTATION: accounts[0].replace(":", "/")}
        tags[ACCESS_ANNOTATION] = access(read_only)
        if c.oidc_provider_arn:
            role = aws.iam.Role(
                f"{store}-{name}-role",
                assume_role_policy=trust_policy(c.oidc_provider_arn, accounts),
                tags=tags,
                opts=opts,
            )
            aws.iam.RolePolicy(f"{store}-{name}-role-policy", role=role.id, policy=policy, opts=opts)
            return ScopedAccess(prefix, pulumi.Output.secret(""), pulumi.Output.secret(""), role.arn)
        user_name = bucket.bucket.apply(lambda b: f"{b}-{name}"[:64])
        user = aws.iam.User(f"{store}-{name}-user", name=user_name, tags=tags, opts=opts)
        aws.iam.UserPolicy(f"{store}-{name}-user-policy", user=user.name, policy=policy, opts=opts)
        key = aws.iam.AccessKey(f"{store}-{name}-access-key", user=user.name, opts=opts)
        return ScopedAccess(prefix, pulumi.Output.secret(key.id), pulumi.Output.secret(key.secret), None)

    return scope
