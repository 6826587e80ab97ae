"""Ceph RGW: the object store backend on the RGW gateway that RookCeph runs (maintained, in-cluster).

The access keys are generated here and handed to a CephObjectStoreUser through a Secret this package owns
(its ``spec.keys``), so they are Pulumi outputs, not values read back from the cluster (an
ObjectBucketClaim's generated keys could not be); JuiceFS creates the bucket on first format.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from . import kube
from .bucket import Bucket
from .rook_ceph import API, RgwGateway

RGW_USER = "juicefs"
"""CephObjectStoreUser of the `ceph-rgw` backend."""


def user_spec(store: str, keys_secret: str) -> dict[str, object]:
    """The CephObjectStoreUser's ``spec``: a user of ``store`` whose keys come from ``keys_secret``."""
    return {
        "store": store,
        "displayName": "JuiceFS data of the AI storage platform",
        "keys": [
            {
                "accessKeyRef": {"name": keys_secret, "key": "access-key"},
                "secretKeyRef": {"name": keys_secret, "key": "secret-key"},
            }
        ],
    }


def rgw_bucket(name: str, bucket: str, rgw: RgwGateway, protect: bool, parent: pulumi.Resource) -> Bucket:
    """A user on the RGW with generated keys; JuiceFS creates ``bucket`` on first format."""
    child = pulumi.ResourceOptions(parent=parent)
    access = random.RandomString(f"{name}-rgw-access-key", length=20, special=False, lower=False, opts=child)
    secret = random.RandomPassword(f"{name}-rgw-secret-key", length=40, special=False, opts=child)
    access_key: pulumi.Output[str] = pulumi.Output.secret(access.result)
    keys_name = f"rgw-{RGW_USER}-keys"
    keys = k8s.core.v1.Secret(
        f"{name}-rgw-keys",
        metadata={"name": keys_name, "namespace": rgw.namespace},
        type="Opaque",
        string_data={"access-key": access_key, "secret-key": secret.result},
        opts=child,
    )
    k8s.apiextensions.CustomResource(
        f"{name}-rgw-user",
        api_version=API,
        kind="CephObjectStoreUser",
        metadata={"name": RGW_USER, "namespace": rgw.namespace},
        spec=user_spec(rgw.store, keys_name),
        opts=kube.stateful(parent, protect, depends_on=[*rgw.depends_on, keys]),
    )
    return Bucket(
        storage_type="s3",
        endpoint=pulumi.Output.from_input(rgw.endpoint),
        bucket=pulumi.Output.from_input(bucket),
        bucket_url=pulumi.Output.from_input(f"{rgw.endpoint}/{bucket}"),
        access_key=access_key,
        secret_key=secret.result,
    )
