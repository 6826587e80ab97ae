"""MetadataEngine: Redis as the JuiceFS metadata engine, owned by the package and configured for durability.

JuiceFS loses files if Redis evicts keys or drops writes, so the generated configuration always sets
``maxmemory-policy noeviction`` and AOF persistence. Redis runs from the official image (Bitnami's images
were frozen in 2025) in a StatefulSet this package owns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import Field

from . import kube, versions
from .section import DnsLabel, Quantity, Resources, Section

PORT = 6379
DURABILITY = {"appendonly": "yes", "maxmemory-policy": "noeviction"}
"""What JuiceFS needs from Redis. Also passed as command-line flags, which override redis.conf and stay visible
to reviewers and policies (the file itself is a Secret)."""


class MetadataSettings(Section):
    """The Redis metadata engine."""

    namespace: DnsLabel = "juicefs-meta"
    """Namespace of the Redis StatefulSet."""
    storage_size: Quantity = "10Gi"
    """Size of the Redis data PVC (AOF and RDB files)."""
    storage_class: str | None = None
    """StorageClass for the Redis PVC; unset uses the cluster default."""
    database: int = Field(1, ge=0, le=15)
    """Redis database number JuiceFS uses."""
    appendfsync: Literal["everysec", "always"] = "everysec"
    """AOF fsync policy: `everysec` loses at most one second of metadata on a crash, `always` none."""
    maxmemory_percent: int = Field(80, ge=10, le=95)
    """Share of the container memory limit Redis may use before refusing writes (never evicting)."""
    resources: Resources = Resources(cpu_request="250m", memory_request="512Mi", memory_limit="2Gi")
    """Requests and limits of the Redis container."""


def redis_conf(settings: MetadataSettings, password: str) -> str:
    """The redis.conf that MetadataEngine mounts: durable (AOF) and never evicting."""
    maxmemory = kube.quantity_bytes(settings.resources.memory_limit) * settings.maxmemory_percent // 100
    return "\n".join(
        [
            "bind 0.0.0.0",
            f"port {PORT}",
            "protected-mode yes",
            f"requirepass {password}",
            "dir /data",
            f"appendonly {DURABILITY['appendonly']}",
            f"appendfsync {settings.appendfsync}",
            "appenddirname appendonlydir",
            "aof-use-rdb-preamble yes",
            "save 900 1",
            "save 300 10",
            "save 60 10000",
            f"maxmemory {maxmemory}",
            f"maxmemory-policy {DURABILITY['maxmemory-policy']}",
            "",
        ]
    )


@dataclass
class MetadataEngineArgs:
    """Inputs of a MetadataEngine."""

    settings: MetadataSettings
    protect: bool = False
    """Protect and retain the Redis data volume."""


def statefulset_spec(s: MetadataSettings, labels: dict[str, str]) -> dict[str, Any]:
    """The Redis StatefulSet's ``spec``: one server with the config Secret's redis.conf, the durability flags on
    its command line, ping probes and a data volume."""
    ping_cmd = f'REDISCLI_AUTH="$(cat /etc/redis/password)" redis-cli -p {PORT} ping | grep -q PONG'
    ping = {"exec": {"command": ["sh", "-c", ping_cmd]}, "timeoutSeconds": 5}
    flags = [part for key, value in DURABILITY.items() for part in (f"--{key}", value)]
    redis = kube.container(
        "redis",
        versions.REDIS_IMAGE,
        s.resources,
        command=["redis-server", "/etc/redis/redis.conf", *flags],
        ports=[{"name": "redis", "containerPort": PORT}],
        livenessProbe={**ping, "initialDelaySeconds": 30, "periodSeconds": 15},
        readinessProbe={**ping, "periodSeconds": 5},
        volumeMounts=[
            {"name": "data", "mountPath": "/data"},
            {"name": "config", "mountPath": "/etc/redis", "readOnly": True},
        ],
    )
    config = {"name": "config", "secret": {"secretName": "redis-config"}}
    return {
        "serviceName": "redis",
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": kube.pod_template(labels, [redis], [config], terminationGracePeriodSeconds=60),
        "volumeClaimTemplates": [kube.data_claim_template(s.storage_size, s.storage_class)],
    }


class MetadataEngine(pulumi.ComponentResource):
    """A single Redis server with a password, AOF persistence and a data PVC."""

    host: pulumi.Output[str]
    """Cluster DNS name of the Redis Service."""
    url: pulumi.Output[str]
    """JuiceFS metadata URL with the password (secret)."""

    def __init__(self, name: str, args: MetadataEngineArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:metadata_engine:MetadataEngine", name, None, opts)
        s = args.settings
        child = pulumi.ResourceOptions(parent=self)
        ns = kube.namespace(f"{name}-ns", s.namespace, "restricted", self)
        password = random.RandomPassword(f"{name}-password", length=40, special=False, opts=child)
        config = k8s.core.v1.Secret(
            f"{name}-config",
            metadata={"name": "redis-config", "namespace": ns.metadata.name},
            type="Opaque",
            string_data={
                "redis.conf": password.result.apply(lambda p: redis_conf(s, p)),
                "password": password.result,
            },
            opts=child,
        )
        labels = kube.labels("redis", "metadata-engine")
        service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={"name": "redis", "namespace": ns.metadata.name, "labels": labels},
            spec={"selector": labels, "ports": [{"name": "redis", "port": PORT, "targetPort": PORT}]},
            opts=child,
        )
        policy = kube.ingress_policy(f"{name}-network-policy", ns.metadata.name, labels, [PORT], self)
        k8s.apps.v1.StatefulSet(
            f"{name}-redis",
            metadata=kube.workload_metadata("redis", ns.metadata.name, s.resources, labels),
            spec=statefulset_spec(s, labels),
            opts=kube.stateful(self, args.protect, depends_on=[config, service, policy]),
        )
        self.host = pulumi.Output.concat("redis.", ns.metadata.name, ".svc.cluster.local")
        self.url = pulumi.Output.secret(
            pulumi.Output.format("redis://:{0}@{1}:{2}/{3}", password.result, self.host, PORT, s.database)
        )
        self.register_outputs({"host": self.host, "url": self.url})
