"""NetworkPolicies: who may connect to the metadata engine and the in-cluster object store.

One policy per namespace, selecting every pod in it. Redis and Sentinel accept connections only from the
namespaces whose pods are JuiceFS clients: the engine's own (replication, Sentinel), the JuiceFS CSI driver's
(its controller, the mount pods and the metadata backup run there) and those of the platform's Fluid datasets
on the JuiceFS runtime (Fluid runs their FUSE and worker pods in the dataset's namespace); the redis_exporters
only from Prometheus. MinIO's S3 port accepts the same clients, every dataset namespace, the namespace of the
platform's offsite copies, the team namespaces (their offsite copies use their own keys) and Prometheus (its
metrics are on the S3 port); its console port, no one. Namespaces are selected by the
``kubernetes.io/metadata.name`` label the API server sets, teams by the team label; pods on the host network
match no selector, so the platform's Fluid runtimes run on the pod network. Enforcement needs a CNI plugin that
implements NetworkPolicy (Calico, Cilium, ...); without one, the policies are stored and change nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..backends.metadata_engines.redis import EXPORTER_PORT, PORT
from ..backends.metadata_engines.redis_sentinel import SENTINEL_PORT
from ..backends.object_stores.minio import PORT as S3_PORT
from ..common import kube
from ..common.sections import DnsLabel, Section
from .quotas import TEAM_LABEL

NAME_LABEL = "kubernetes.io/metadata.name"
PROMETHEUS_POD = {"app.kubernetes.io/name": "prometheus"}
"""Labels the Prometheus Operator gives every Prometheus server pod."""


class NetworkPolicySettings(Section):
    """NetworkPolicies around the metadata engine and MinIO (they need a CNI plugin that enforces them)."""

    enabled: bool = True
    """Admit connections to Redis, Sentinel and MinIO only from the namespaces that need them."""
    prometheus_namespace: DnsLabel = "monitoring"
    """Namespace of the Prometheus servers that scrape the redis_exporters and MinIO."""


@dataclass
class NetworkPoliciesArgs:
    """Inputs of NetworkPolicies: the namespaces of the guarded services and of their clients."""

    settings: NetworkPolicySettings
    metadata_namespace: str | None = None
    """Namespace of the in-cluster metadata engine (None: ElastiCache or no JuiceFS)."""
    minio_namespace: str | None = None
    """Namespace of MinIO (None: another object store backend)."""
    juicefs_clients: Sequence[str] = ()
    """Namespaces of the JuiceFS clients: the CSI driver's, the JuiceFS-runtime dataset namespaces."""
    bucket_clients: Sequence[str] = ()
    """Namespaces that reach the bucket besides the JuiceFS clients: every dataset namespace, the offsite copy's."""
    monitoring: bool = False
    """Admit Prometheus (the stack's monitoring is on)."""
    after: Sequence[pulumi.Resource] = field(default_factory=list)
    """The namespaces the policies go into."""


def namespaces(names: Iterable[str]) -> dict[str, Any]:
    """A peer: every pod of the namespaces ``names``."""
    selector = {"matchExpressions": [{"key": NAME_LABEL, "operator": "In", "values": sorted(set(names))}]}
    return {"namespaceSelector": selector}


TEAMS: dict[str, Any] = {"namespaceSelector": {"matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]}}
"""A peer: every pod of every team namespace."""


def prometheus(namespace: str) -> dict[str, Any]:
    """A peer: the Prometheus server pods of ``namespace``."""
    return {**namespaces([namespace]), "podSelector": {"matchLabels": PROMETHEUS_POD}}


def tcp(*ports: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": port} for port in ports]


def metadata_ingress(a: NetworkPoliciesArgs, own: str) -> list[dict[str, Any]]:
    """Ingress rules of the metadata engine's namespace ``own``."""
    rules = [{"from": [namespaces([own, *a.juicefs_clients])], "ports": tcp(PORT, SENTINEL_PORT)}]
    if a.monitoring:
        rules.append({"from": [prometheus(a.settings.prometheus_namespace)], "ports": tcp(EXPORTER_PORT)})
    return rules


def minio_ingress(a: NetworkPoliciesArgs, own: str) -> list[dict[str, Any]]:
    """Ingress rules of MinIO's namespace ``own`` (its bucket and user Jobs run there too)."""
    peers = [namespaces([own, *a.juicefs_clients, *a.bucket_clients]), TEAMS]
    if a.monitoring:
        peers.append(prometheus(a.settings.prometheus_namespace))
    return [{"from": peers, "ports": tcp(S3_PORT)}]


class NetworkPolicies(pulumi.ComponentResource):
    """An ingress policy in the metadata engine's namespace and in MinIO's, each selecting all its pods."""

    def __init__(self, name: str, args: NetworkPoliciesArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:network_policies:NetworkPolicies", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.after))
        guarded = [
            ("metadata", args.metadata_namespace, metadata_ingress),
            ("object-store", args.minio_namespace, minio_ingress),
        ]
        names = []
        for role, ns, ingress in guarded:
            if ns is None:
                continue
            policy = k8s.networking.v1.NetworkPolicy(
                f"{name}-{role}",
                metadata={"name": f"{role}-clients", "namespace": ns, "labels": kube.labels(role, "network-policy")},
                spec={"podSelector": {}, "policyTypes": ["Ingress"], "ingress": ingress(args, ns)},
                opts=child,
            )
            names.append(policy.metadata.name)
        self.register_outputs({"policies": names})
