"""MinIO: the in-cluster object store backend for dev clusters (community edition, frozen upstream).

MinIO publishes no images after October 2025: the StatefulSet runs the last published image, pinned in
``versions``. Root credentials come from pulumi-random and are mounted as files; a Job creates the bucket
(idempotently) and applies the lifecycle rules that expire backups. Each scope (``ObjectStore.scoped_access``)
is a MinIO user with the prefix policy, created by a Job of its own: a new scope adds a Job and leaves the
others as they are (a Job's pod template cannot change in place).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import Field

from ...common import kube, versions
from ...common.sections import Problem, Quantity, Resources, Section
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

PORT = 9000
ROOT_DIR = "/run/secrets/minio-root"
"""Where MinIO and the bucket Job read the root credentials (files, not environment variables)."""
ROOT_MOUNT = {"name": "root-credentials", "mountPath": ROOT_DIR, "readOnly": True}
ROOT_VOLUME = {"name": "root-credentials", "secret": {"secretName": "minio-root"}}
SCOPE_DIR = "/run/secrets/minio-scope"
"""Where a scope Job reads the scope's keys (files, not environment variables)."""
JOB_RESOURCES = Resources(memory_limit="128Mi", memory_request="64Mi", cpu_request="50m", cpu_limit="500m")


class MinioSettings(Section):
    """The in-cluster MinIO StatefulSet."""

    replicas: int = Field(1, ge=1, le=16)
    """MinIO servers; 1 for a single drive, 4 or more for erasure-coded distributed mode."""
    storage_size: Quantity = "50Gi"
    """Size of each server's data PVC."""
    storage_class: str | None = None
    """StorageClass for the data PVCs; unset uses the cluster default."""
    resources: Resources = Resources(memory_request="512Mi", memory_limit="2Gi", cpu_request="250m")
    """Requests and limits of each MinIO server."""

    def problems(self) -> list[Problem]:
        """Distributed MinIO needs at least four drives."""
        if self.replicas in (2, 3):
            return [Problem("replicas", "expected 1, or 4 to 16", self.replicas, "distributed MinIO needs 4 drives")]
        return []


def lifecycle(expirations: Mapping[str, int]) -> str:
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


def statefulset_spec(m: MinioSettings, namespace: str, labels: dict[str, str], metrics: bool = False) -> dict[str, Any]:
    """The MinIO StatefulSet's ``spec``: one drive per server, distributed across the servers when several
    (with ``metrics``, the Prometheus endpoints need no token: they expose no data, only request counts)."""
    if m.replicas == 1:
        server_args = ["server", "/data", "--console-address", ":9001"]
    else:
        hosts = f"http://minio-{{0...{m.replicas - 1}}}.minio-hl.{namespace}.svc.cluster.local/data"
        server_args = ["server", hosts, "--console-address", ":9001"]
    probe = {"httpGet": {"path": "/minio/health/live", "port": PORT}, "periodSeconds": 15}
    minio = kube.container(
        "minio",
        versions.MINIO_IMAGE,
        m.resources,
        args=server_args,
        env=[
            {"name": "HOME", "value": "/tmp"},
            {"name": "MINIO_ROOT_USER_FILE", "value": f"{ROOT_DIR}/MINIO_ROOT_USER"},
            {"name": "MINIO_ROOT_PASSWORD_FILE", "value": f"{ROOT_DIR}/MINIO_ROOT_PASSWORD"},
            *([{"name": "MINIO_PROMETHEUS_AUTH_TYPE", "value": "public"}] if metrics else []),
        ],
        ports=[{"name": "s3", "containerPort": PORT}, {"name": "console", "containerPort": 9001}],
        livenessProbe=probe,
        readinessProbe={**probe, "httpGet": {"path": "/minio/health/ready", "port": PORT}},
        volumeMounts=[{"name": "data", "mountPath": "/data"}, kube.TMP_MOUNT, ROOT_MOUNT],
    )
    return {
        "serviceName": "minio-hl",
        "replicas": m.replicas,
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": labels},
        "template": kube.pod_template(labels, [minio], [kube.TMP_VOLUME, ROOT_VOLUME]),
        "volumeClaimTemplates": [kube.data_claim_template(m.storage_size, m.storage_class)],
    }


def bucket_job_spec(bucket: str, namespace: str, expirations: Mapping[str, int]) -> dict[str, Any]:
    """The bucket Job's ``spec``: create the bucket if missing, then apply the expiry rules."""
    script = (
        f'mc alias set store "$ENDPOINT" "$(cat {ROOT_DIR}/MINIO_ROOT_USER)" "$(cat {ROOT_DIR}/MINIO_ROOT_PASSWORD)"\n'
        'mc mb --ignore-existing "store/$BUCKET"\n'
    )
    if expirations:
        script += 'printf %s "$LIFECYCLE" | mc ilm import "store/$BUCKET"\n'
    mc = kube.container(
        "mc",
        versions.MINIO_CLIENT_IMAGE,
        JOB_RESOURCES,
        command=["/bin/sh", "-ec"],
        args=[script],
        env=[
            {"name": "MC_CONFIG_DIR", "value": "/tmp/mc"},
            {"name": "ENDPOINT", "value": f"http://minio.{namespace}.svc:{PORT}"},
            {"name": "BUCKET", "value": bucket},
            {"name": "LIFECYCLE", "value": lifecycle(expirations)},
        ],
        volumeMounts=[kube.TMP_MOUNT, ROOT_MOUNT],
    )
    labels = kube.labels("minio-bucket", "object-store")
    template = kube.pod_template(labels, [mc], [kube.TMP_VOLUME, ROOT_VOLUME], restartPolicy="OnFailure")
    return {"backoffLimit": 10, "template": template}


def scope_script() -> str:
    """Shell a scope Job runs: add (or update) the scope's user, create (or replace) its policy, attach it.
    Attaching a policy that is already attached fails in ``mc``; the user's info then shows it."""
    return (
        f'mc alias set store "$ENDPOINT" "$(cat {ROOT_DIR}/MINIO_ROOT_USER)" "$(cat {ROOT_DIR}/MINIO_ROOT_PASSWORD)"\n'
        f'user="$(cat {SCOPE_DIR}/access-key)"\n'
        f'mc admin user add store "$user" "$(cat {SCOPE_DIR}/secret-key)"\n'
        'printf %s "$POLICY_DOCUMENT" > /tmp/policy.json\n'
        'mc admin policy create store "$POLICY" /tmp/policy.json\n'
        'mc admin policy attach store "$POLICY" --user "$user" ||\n'
        '  mc admin user info store "$user" | grep -q "$POLICY"\n'
        'echo "user of scope $POLICY ready"\n'
    )


def scope_job_spec(
    scope: str, namespace: str, policy: str, keys_secret: str, checksum: pulumi.Input[str]
) -> dict[str, Any]:
    """The ``spec`` of the Job that makes the MinIO user of one scope with ``policy`` (named ``scope-<scope>``),
    the keys read from ``keys_secret``; ``checksum`` (of the keys) in the pod template re-runs it when they change."""
    mc = kube.container(
        "mc",
        versions.MINIO_CLIENT_IMAGE,
        JOB_RESOURCES,
        command=["/bin/sh", "-ec"],
        args=[scope_script()],
        env=[
            {"name": "MC_CONFIG_DIR", "value": "/tmp/mc"},
            {"name": "ENDPOINT", "value": f"http://minio.{namespace}.svc:{PORT}"},
            {"name": "POLICY", "value": f"scope-{scope}"},
            {"name": "POLICY_DOCUMENT", "value": policy},
        ],
        volumeMounts=[kube.TMP_MOUNT, ROOT_MOUNT, {"name": "scope", "mountPath": SCOPE_DIR, "readOnly": True}],
    )
    volumes = [kube.TMP_VOLUME, ROOT_VOLUME, {"name": "scope", "secret": {"secretName": keys_secret}}]
    labels = {**kube.labels("minio-scope", "object-store"), "ai-storage-platform/scope": scope}
    template = kube.pod_template(labels, [mc], volumes, restartPolicy="OnFailure")
    template["metadata"]["annotations"] = {"ai-storage-platform/scope-checksum": checksum}
    return {"backoffLimit": 10, "template": template}


def _checksum(*values: str) -> str:
    """A digest that changes with the scope's keys (it reveals neither)."""
    return hashlib.sha256("\0".join(values).encode()).hexdigest()[:16]


def minio_scoper(store: str, bucket: str, ns: k8s.core.v1.Namespace, namespace: str, after: list[Any]) -> Scoper:
    """Credentials for one prefix of ``bucket``: a MinIO user (generated keys) with the prefix policy, created
    by its own Job once MinIO (``after``) is up."""

    def scope(
        name: str,
        prefix: str,
        service_accounts: Sequence[tuple[str, str]],
        opts: pulumi.ResourceOptions,
        read_only: bool = False,
    ) -> ScopedAccess:
        user = random.RandomString(f"{store}-{name}-user", length=20, special=False, upper=False, opts=opts)
        password = random.RandomPassword(f"{store}-{name}-password", length=40, special=False, opts=opts)
        access_key: pulumi.Output[str] = pulumi.Output.secret(user.result)
        policy = prefix_policy(bucket, prefix, read_only)
        ns_name, account = service_accounts[0]
        labels = {**kube.labels("minio-scope", "object-store"), "ai-storage-platform/scope": name}
        scope_annotations = {PREFIX_ANNOTATION: prefix, ACCOUNT_ANNOTATION: f"{ns_name}/{account}"}
        scope_annotations[ACCESS_ANNOTATION] = access(read_only)
        keys_name = f"minio-scope-{name}"[:63]
        keys = k8s.core.v1.Secret(
            f"{store}-{name}-keys",
            metadata={
                "name": keys_name,
                "namespace": ns.metadata.name,
                "labels": labels,
                "annotations": scope_annotations,
            },
            type="Opaque",
            string_data={"access-key": access_key, "secret-key": password.result},
            opts=opts,
        )
        # A digest reveals nothing of the keys: unsecret it, or the whole Job spec would be hidden in plans.
        checksum = pulumi.Output.unsecret(
            pulumi.Output.all(access_key, password.result).apply(lambda k: _checksum(k[0], k[1]))
        )
        job = k8s.batch.v1.Job(
            f"{store}-{name}-user-job",
            metadata=kube.workload_metadata(
                f"minio-scope-{name}"[:63], ns.metadata.name, JOB_RESOURCES, labels, scope_annotations
            ),
            spec=scope_job_spec(name, namespace, policy, keys_name, checksum),
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[*after, keys])),
        )

        # Pulumi waits for a Job to complete: a client given these keys (the JuiceFS volume Secret, a team's
        # offsite Secret) is created only once the Job has made the user, so its first use is not refused.
        def once_made(key: pulumi.Output[str]) -> pulumi.Output[str]:
            return pulumi.Output.secret(pulumi.Output.all(job.id, key).apply(lambda made: made[1]))

        return ScopedAccess(prefix, once_made(access_key), once_made(password.result), None)

    return scope


def services(name: str, ns: k8s.core.v1.Namespace, labels: dict[str, str], parent: pulumi.Resource) -> list[Any]:
    """The headless Service the servers find each other through, and the S3 Service clients use."""
    port = [{"name": "s3", "port": PORT, "targetPort": PORT}]
    child = pulumi.ResourceOptions(parent=parent)
    headless = k8s.core.v1.Service(
        f"{name}-headless",
        metadata={"name": "minio-hl", "namespace": ns.metadata.name, "labels": labels},
        spec={"clusterIP": "None", "publishNotReadyAddresses": True, "selector": labels, "ports": port},
        opts=child,
    )
    service = k8s.core.v1.Service(
        f"{name}-service",
        metadata={"name": "minio", "namespace": ns.metadata.name, "labels": labels},
        spec={"selector": labels, "ports": port},
        opts=child,
    )
    return [headless, service]


def minio_bucket(
    name: str,
    bucket: str,
    m: MinioSettings,
    ns: k8s.core.v1.Namespace,
    namespace: str,
    protect: bool,
    expirations: Mapping[str, int],
    parent: pulumi.Resource,
    metrics: bool = False,
) -> Bucket:
    """MinIO servers with generated root credentials, and a Job that creates ``bucket``."""
    child = pulumi.ResourceOptions(parent=parent)
    user = random.RandomString(f"{name}-root-user", length=12, special=False, upper=False, opts=child)
    password = random.RandomPassword(f"{name}-root-password", length=40, special=False, opts=child)
    access_key: pulumi.Output[str] = pulumi.Output.secret(user.result)
    root = k8s.core.v1.Secret(
        f"{name}-root",
        metadata={"name": "minio-root", "namespace": ns.metadata.name},
        type="Opaque",
        string_data={"MINIO_ROOT_USER": access_key, "MINIO_ROOT_PASSWORD": password.result},
        opts=child,
    )
    labels = kube.labels("minio", "object-store")
    headless, service = services(name, ns, labels, parent)
    statefulset = k8s.apps.v1.StatefulSet(
        f"{name}-minio",
        metadata=kube.workload_metadata("minio", ns.metadata.name, m.resources, labels),
        spec=statefulset_spec(m, namespace, labels, metrics),
        opts=kube.stateful(parent, protect, depends_on=[root, headless]),
    )
    job_labels = kube.labels("minio-bucket", "object-store")
    job_policy = kube.ingress_policy(f"{name}-bucket-network-policy", ns.metadata.name, job_labels, [], parent)
    bucket_job = k8s.batch.v1.Job(
        f"{name}-bucket",
        metadata=kube.workload_metadata(f"minio-bucket-{bucket}"[:63], ns.metadata.name, JOB_RESOURCES),
        spec=bucket_job_spec(bucket, namespace, expirations),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[statefulset, service, job_policy]),
    )
    scope_labels = kube.labels("minio-scope", "object-store")
    scope_policy = kube.ingress_policy(f"{name}-scope-network-policy", ns.metadata.name, scope_labels, [], parent)
    endpoint = pulumi.Output.concat("http://minio.", namespace, f".svc.cluster.local:{PORT}")
    return Bucket(
        scope=minio_scoper(name, bucket, ns, namespace, [statefulset, service, bucket_job, scope_policy]),
        storage_type="minio",
        endpoint=endpoint,
        bucket=pulumi.Output.from_input(bucket),
        bucket_url=pulumi.Output.concat(endpoint, "/", bucket),
        access_key=access_key,
        secret_key=password.result,
    )
