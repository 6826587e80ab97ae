"""Small Kubernetes building blocks shared by the components: namespaces, labels, security, options."""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from . import versions
from .sections import Resources
from .versions import ChartPin

PodSecurity = Literal["privileged", "baseline", "restricted"]

UID = 10001
"""UID and GID of the platform's own containers: non-root and above 10000, clear of host accounts."""

# The texts land in every workload's annotations: CKV_K8S_43 keeps the path versions.py had before it moved to
# common/ (0.3.0), so that an upgrade does not update every workload for a comment.
CHECKOV_SKIPS: dict[str, str] = {
    "CKV_K8S_43": "image pinned to an exact release tag in components/versions.py (the security gate rejects "
    "floating tags); digests need a registry lookup, which the offline build cannot make",
    "CKV_K8S_11": "no CPU limit unless the stack sets resources.cpuLimit: CFS throttling of this data-path "
    "server stalls every JuiceFS call waiting on it; the CPU request is set and memory is limited",
    "CKV_K8S_38": "this job calls the API server (it creates and deletes VolumeSnapshots) with its own service "
    "account, whose Role allows only that in its namespace",
}
"""Why a checkov check is skipped on the objects that carry its annotation (see ``checkov_skips``)."""

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def quantity_bytes(quantity: str) -> int:
    """Bytes in a Kubernetes memory/storage quantity such as ``512Mi`` or ``2G``."""
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([KMGTPE]i|[kMGTPE]?)", quantity)
    if not match:
        raise ValueError(f"not a byte quantity: {quantity!r}")
    number, unit = match.groups()
    return int(float(number) * (_BINARY.get(unit) or _DECIMAL[unit]))


def gib_text(size: float, digits: int = 0) -> str:
    """Bytes as GiB a person reads in an arithmetic (``12,159Gi``)."""
    return f"{size / 2**30:,.{digits}f}Gi"


def labels(app: str, component: str) -> dict[str, str]:
    """The recommended app.kubernetes.io labels for an object the platform owns."""
    return {
        "app.kubernetes.io/name": app,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "ai-storage-platform",
        "app.kubernetes.io/managed-by": "pulumi",
    }


def namespace(
    name: str,
    ns: str,
    level: PodSecurity,
    parent: pulumi.Resource,
    extra_labels: Mapping[str, str] | None = None,
    protect: bool = False,
) -> k8s.core.v1.Namespace:
    """A namespace with Pod Security Standard labels: ``enforce`` at ``level``, audit and warn at restricted (and
    ``extra_labels``); ``protect``: protected and kept on delete (deleting a Namespace deletes every claim in it)."""
    return k8s.core.v1.Namespace(
        name,
        metadata={
            "name": ns,
            "labels": {
                "pod-security.kubernetes.io/enforce": level,
                "pod-security.kubernetes.io/audit": "restricted",
                "pod-security.kubernetes.io/warn": "restricted",
                "app.kubernetes.io/part-of": "ai-storage-platform",
                **(extra_labels or {}),
            },
        },
        opts=stateful(parent, protect) if protect else pulumi.ResourceOptions(parent=parent),
    )


def restricted_container(uid: int) -> dict[str, Any]:
    """A container securityContext that passes the restricted Pod Security Standard."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def restricted_pod(uid: int) -> dict[str, Any]:
    """A pod securityContext for a non-root workload whose volumes belong to ``uid``."""
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


ON_ROOT_MISMATCH = {"fsGroupChangePolicy": "OnRootMismatch"}
"""Pod securityContext fields of a pod that mounts the checkpoint tier: the kubelet changes the volume's ownership
only when its root's differs, instead of re-chowning every file of the checkpoint history at each pod start
(CephFS), so start time does not grow with the history."""
TMP_VOLUME = {"name": "tmp", "emptyDir": {}}
"""Scratch space for a container whose root filesystem is read-only."""
TMP_MOUNT = {"name": "tmp", "mountPath": "/tmp"}


def container(name: str, image: str, resources: Resources, **fields: Any) -> dict[str, Any]:
    """A container of the platform's own workloads: the pinned image pulled on every start, requests and
    limits, and a securityContext that passes the restricted Pod Security Standard."""
    return {
        "name": name,
        "image": image,
        "imagePullPolicy": "Always",
        "resources": resources.spec(),
        "securityContext": restricted_container(UID),
        **fields,
    }


def cronjob_spec(schedule: str, template: dict[str, Any], kept_successes: int = 1) -> dict[str, Any]:
    """A CronJob ``spec`` for a maintenance job: one run at a time, two retries, the last runs kept."""
    return {
        "schedule": schedule,
        "concurrencyPolicy": "Forbid",
        "successfulJobsHistoryLimit": kept_successes,
        "failedJobsHistoryLimit": 3,
        "jobTemplate": {"spec": {"backoffLimit": 2, "template": template}},
    }


def pod_template(
    labels: Mapping[str, str], containers: list[dict[str, Any]], volumes: list[dict[str, Any]], **spec: Any
) -> dict[str, Any]:
    """The pod template of the platform's own workloads: non-root, volumes owned by the platform's UID, no
    service account token; ``spec`` adds fields such as ``restartPolicy``."""
    return {
        "metadata": {"labels": dict(labels)},
        "spec": {
            "securityContext": restricted_pod(UID),
            "automountServiceAccountToken": False,
            "containers": containers,
            "volumes": volumes,
            **spec,
        },
    }


def workload_metadata(
    name: str,
    namespace: pulumi.Input[str],
    resources: Resources,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    skips: Sequence[str] = (),
) -> dict[str, Any]:
    """The metadata of a workload (StatefulSet, Job, CronJob), with the checkov skips its ``resources`` call for
    (and ``skips``)."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": {**(annotations or {}), **checkov_skips(resources, *skips)},
    }
    if labels:
        metadata["labels"] = dict(labels)
    return metadata


def checkov_skips(resources: Resources, *also: str) -> dict[str, str]:
    """Annotations making checkov skip, with the reason, what a workload does on purpose: image tags rather
    than digests, no CPU limit when ``resources`` sets none, and the checks named in ``also``."""
    checks = ["CKV_K8S_43"] + ([] if resources.cpu_limit else ["CKV_K8S_11"]) + list(also)
    return skip_annotations({check: CHECKOV_SKIPS[check] for check in checks})


def skip_annotations(reasons: Mapping[str, str]) -> dict[str, str]:
    """``checkov.io/skipN`` annotations, one per check of ``reasons`` (check -> why it is skipped)."""
    return {f"checkov.io/skip{i}": f"{check}={why}" for i, (check, why) in enumerate(reasons.items(), 1)}


def ingress_policy(
    name: str, ns: pulumi.Input[str], pod_labels: dict[str, str], ports: Sequence[int], parent: pulumi.Resource
) -> k8s.networking.v1.NetworkPolicy:
    """A NetworkPolicy denying the selected pods all ingress except TCP ``ports`` from any source (who may reach
    the metadata engine and MinIO is ``network_policies``' business)."""
    spec: dict[str, Any] = {"podSelector": {"matchLabels": pod_labels}, "policyTypes": ["Ingress"]}
    if ports:
        spec["ingress"] = [{"ports": [{"protocol": "TCP", "port": port} for port in ports]}]
    return k8s.networking.v1.NetworkPolicy(
        name,
        metadata={"name": pod_labels["app.kubernetes.io/name"], "namespace": ns, "labels": pod_labels},
        spec=spec,
        opts=pulumi.ResourceOptions(parent=parent),
    )


def data_claim_template(size: str, storage_class: str | None) -> dict[str, Any]:
    """The ``data`` volumeClaimTemplate of a StatefulSet: one RWO volume per replica."""
    return {
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
    }


def ephemeral_volume(name: str, storage_class: Any, size: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod's generic ephemeral volume ``name``: an RWO claim of ``storage_class``, made with the pod and deleted
    with it (counted against the namespace's quota of that class)."""
    claim = {
        "metadata": {"labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
    }
    return {"name": name, "ephemeral": {"volumeClaimTemplate": claim}}


BUDGET_LABEL = "ai-storage-platform/disruption-budget"
"""Pod label a chart's controller pods get from the platform, for its PodDisruptionBudget."""


def spread(labels: Mapping[str, str], required: bool = False) -> dict[str, Any]:
    """Pod anti-affinity keeping the pods that carry ``labels`` on different nodes (or preferring to)."""
    term = {"labelSelector": {"matchLabels": dict(labels)}, "topologyKey": "kubernetes.io/hostname"}
    if required:
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    preferred = [{"weight": 100, "podAffinityTerm": term}]
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}


def budget(
    resource_name: str,
    name: str,
    namespace: pulumi.Input[str],
    selector: Mapping[str, str],
    parent: pulumi.Resource,
    after: Sequence[pulumi.Resource],
) -> k8s.policy.v1.PodDisruptionBudget:
    """A PodDisruptionBudget letting at most one of the selected pods be evicted at a time (drains, upgrades)."""
    return k8s.policy.v1.PodDisruptionBudget(
        resource_name,
        metadata={"name": name, "namespace": namespace, "labels": labels(name, "disruption-budget")},
        spec={"maxUnavailable": 1, "selector": {"matchLabels": dict(selector)}},
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(after)),
    )


def stateful(parent: pulumi.Resource, protect: bool, **kwargs: Any) -> pulumi.ResourceOptions:
    """Options for a resource that holds data: protected and kept on delete when the stack says so."""
    return pulumi.ResourceOptions(parent=parent, protect=protect, retain_on_delete=protect, **kwargs)


def release(
    resource_name: str,
    pin: ChartPin,
    namespace: pulumi.Input[str],
    values: Mapping[str, Any],
    parent: pulumi.Resource,
    *,
    release_name: str | None = None,
    depends_on: Sequence[pulumi.Resource] = (),
    wait: bool = False,
) -> k8s.helm.v3.Release:
    """A Helm release of a pinned chart (a helm.v3.Release runs the chart's hooks; helm.v4.Chart skips them).
    ``wait``: the release is done only when its workloads are ready (up to 10 minutes), so resources that depend
    on it never meet a webhook or controller that is not serving yet."""
    pin = versions.chart(pin)  # the stack's mirror of the chart repository, when it names one
    oci = pin.repo.startswith("oci://")
    options: dict[str, Any] = {"skip_await": False, "timeout": 600} if wait else {}
    return k8s.helm.v3.Release(
        resource_name,
        name=release_name or pin.chart,
        namespace=namespace,
        chart=f"{pin.repo}/{pin.chart}" if oci else pin.chart,
        version=pin.version,
        repository_opts=None if oci else {"repo": pin.repo},
        values=values,
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
        **options,
    )


class CustomObject(pulumi.CustomResource):
    """A custom resource whose fields sit at the top level, beside ``metadata`` (a VolumeSnapshotClass has
    ``driver``, ``deletionPolicy`` and ``parameters``, and no ``spec``). pulumi-kubernetes' Python
    ``CustomResource`` sends only ``spec`` (pulumi-kubernetes#3549); the provider creates any object of a
    served kind from its full inputs, which is what this registers."""

    def __init__(
        self,
        resource_name: str,
        api_version: str,
        kind: str,
        metadata: Mapping[str, Any],
        fields: Mapping[str, Any],
        opts: pulumi.ResourceOptions,
    ):
        props = {"apiVersion": api_version, "kind": kind, "metadata": dict(metadata), **fields}
        version = pulumi.ResourceOptions(version=importlib.metadata.version("pulumi-kubernetes"))
        super().__init__(
            f"kubernetes:{api_version}:{kind}", resource_name, props, pulumi.ResourceOptions.merge(opts, version)
        )
