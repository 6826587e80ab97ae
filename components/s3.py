"""AWS S3: the maintained object store backend for cloud stacks, through pulumi-aws.

The bucket is versioned, encrypted with SSE-KMS, closed to the public, and moves objects to a colder storage
class after a while. The cluster reaches it through an IAM role for service accounts when the stack names
its EKS OIDC provider, else through an IAM user's access key (both scoped to this bucket).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pulumi
from pydantic import Field

from . import kube
from .bucket import Bucket, ScopedAccess, Scoper, prefix_policy
from .section import Section


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


def lifecycle_rules(c: S3Settings, expirations: Mapping[str, int]) -> list[dict[str, Any]]:
    """The bucket's lifecycle: the cold transition for everything, and the expiry of each prefix given."""
    cold = {
        "id": "cold-tier",
        "status": "Enabled",
        "filter": {"prefix": ""},
        "transitions": [{"days": c.transition_days, "storage_class": c.cold_storage_class}],
        "noncurrent_version_expiration": {"noncurrent_days": c.noncurrent_version_days},
        "abort_incomplete_multipart_upload": {"days_after_initiation": 7},
    }
    expiries = [
        {
            "id": f"expire-{prefix.strip('/')}",
            "status": "Enabled",
            "filter": {"prefix": prefix},
            "expiration": {"days": d},
        }
        for prefix, d in sorted(expirations.items())
    ]
    return [cold, *expiries]


def access_policy(arn: str) -> str:
    """The IAM policy that lets JuiceFS list the bucket and read, write and delete its objects."""
    return json.dumps(
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
        rules=[{"apply_server_side_encryption_by_default": {"sse_algorithm": "aws:kms"}, "bucket_key_enabled": True}],
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
    policy = bucket.arn.apply(access_policy)
    access_key, secret_key, role_arn = _access(name, bucket_name, c, policy, child)
    return Bucket(
        scope=s3_scoper(name, bucket, c),
        storage_type="s3",
        endpoint=pulumi.Output.from_input(f"https://s3.{c.region}.amazonaws.com"),
        bucket=bucket.bucket,
        bucket_url=bucket.bucket.apply(lambda b: f"https://{b}.s3.{c.region}.amazonaws.com"),
        access_key=access_key,
        secret_key=secret_key,
        role_arn=role_arn,
    )


def s3_scoper(store: str, bucket: Any, c: S3Settings) -> Scoper:
    """Credentials for one prefix of ``bucket``: with `oidcProviderArn` an IAM role that only the given service
    accounts can assume (no keys), else an IAM user with an access key; both carry the prefix policy."""
    import pulumi_aws as aws

    def scope(
        name: str, prefix: str, service_accounts: Sequence[tuple[str, str]], opts: pulumi.ResourceOptions
    ) -> ScopedAccess:
        policy = bucket.bucket.apply(lambda b: prefix_policy(b, prefix))
        accounts = [f"{ns}:{sa}" for ns, sa in service_accounts]
        tags = {"ai-storage-platform/prefix": prefix, "ai-storage-platform/service-account": accounts[0]}
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


def _access(
    name: str, bucket_name: str, c: S3Settings, policy: pulumi.Output[str], child: pulumi.ResourceOptions
) -> tuple[pulumi.Output[str], pulumi.Output[str], pulumi.Output[str] | None]:
    """(access key, secret key, role ARN): an IAM role for service accounts when the stack names its OIDC
    provider (no keys then), else an IAM user with an access key."""
    import pulumi_aws as aws

    if c.oidc_provider_arn:
        role = aws.iam.Role(
            f"{name}-role", assume_role_policy=trust_policy(c.oidc_provider_arn, c.service_accounts), opts=child
        )
        aws.iam.RolePolicy(f"{name}-role-policy", role=role.id, policy=policy, opts=child)
        return pulumi.Output.secret(""), pulumi.Output.secret(""), role.arn
    user = aws.iam.User(f"{name}-user", name=f"{bucket_name}-juicefs", opts=child)
    aws.iam.UserPolicy(f"{name}-user-policy", user=user.name, policy=policy, opts=child)
    key = aws.iam.AccessKey(f"{name}-access-key", user=user.name, opts=child)
    return pulumi.Output.secret(key.id), pulumi.Output.secret(key.secret), None
