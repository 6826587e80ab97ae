"""Redis with Sentinel: the in-cluster metadata engine that survives the loss of a node.

A StatefulSet of data nodes (a primary and its replicas, every one durable: AOF and ``noeviction``) and a
StatefulSet of Sentinels, each pod on its own node, with PodDisruptionBudgets. One password guards the data
nodes and the Sentinels; a JuiceFS client needs the Sentinel URL (``redis://:PASSWORD@MASTER,S1,S2:26379/DB``,
the form the JuiceFS docs give, plus client timeouts) and ``SENTINEL_PASSWORD`` in its environment. Every pod
starts through one script (``redis-start.sh``) that finds the current primary (ask the Sentinels, else a data
node that has replicas, else the initial primary) and then runs ``<flavor>-server`` or ``<flavor>-sentinel``
(Redis or Valkey, from ``ENGINE``); the data-path tests run that script on the real binaries of both. A little
over 300 lines: one system (the layout's settings, its config files, both pod specs and their wiring), which
reads best in one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ...common import kube
from ...common.sections import DnsLabel, Resources, Section
from .redis import (
    CONFIG_DIR,
    CONFIG_SECRET,
    IMAGES,
    PORT,
    MetadataEndpoint,
    RedisSettings,
    config_secret,
    data_container,
    durability_flags,
    engine_password,
    exporter_container,
    ping_probe,
    redis_conf,
)

SENTINEL_PORT = 26379
SCRIPTS_DIR = "/opt/redis-start"
DATA_SERVICE = "redis"
SENTINEL_SERVICE = "redis-sentinel"
PRIMARY = "@PRIMARY@"
"""Placeholder of the primary's address in sentinel.conf; the start script fills it in."""


class SentinelSettings(Section):
    """A Redis primary, its replicas and the Sentinels that fail over between them."""

    replicas: int = Field(2, ge=0, le=8)
    """Replicas of the primary, each a full durable copy that can take over."""
    sentinels: int = Field(3, ge=1, le=7)
    """Sentinel processes; a majority of them must agree before a replica is promoted."""
    master_name: DnsLabel = "juicefs"
    """Name the Sentinels know the primary by (part of the JuiceFS metadata URL)."""
    down_after_seconds: int = Field(5, ge=1, le=600)
    """Seconds the primary must be unreachable before the Sentinels start a failover."""
    failover_timeout_seconds: int = Field(60, ge=10, le=3600)
    """Seconds a failover may take before another Sentinel retries it."""
    min_replicas_to_write: int = Field(1, ge=0, le=8)
    """The primary refuses writes while fewer replicas are connected, so an isolated primary cannot accept
    writes that a failover would then lose."""
    spread: Literal["required", "preferred"] = "required"
    """Each data node and each Sentinel must (`required`) or should (`preferred`) run on its own node."""
    resources: Resources = Resources(cpu_request="50m", memory_request="64Mi", memory_limit="256Mi")
    """Requests and limits of each Sentinel container."""
    client_read_timeout_seconds: int = Field(5, ge=1, le=300)
    """Seconds a JuiceFS client waits for a Redis reply before it retries (the URL's `read-timeout`; JuiceFS's
    default is 30, which a failover can hit in full: see docs/datapath.md)."""
    client_max_retry_backoff_seconds: int = Field(2, ge=1, le=60)
    """Longest pause between a JuiceFS client's retries (the URL's `max-retry-backoff`; JuiceFS's default 10)."""

    def quorum(self) -> int:
        """Sentinels that must agree the primary is down: a majority."""
        return self.sentinels // 2 + 1


def replication_lines(s: SentinelSettings, password: str) -> list[str]:
    """redis.conf lines of a data node that can be a primary or a replica."""
    return [
        f"masterauth {password}",
        f"min-replicas-to-write {s.min_replicas_to_write}",
        "min-replicas-max-lag 10",
        "replica-read-only yes",
    ]


def sentinel_conf(s: SentinelSettings, password: str) -> str:
    """sentinel.conf: password required of clients and of the other Sentinels, hostnames (pods' DNS names)
    announced and resolved, and the primary monitored under ``master_name`` (its address filled in at start)."""
    name = s.master_name
    return "\n".join(
        [
            "bind 0.0.0.0",
            f"port {SENTINEL_PORT}",
            f"requirepass {password}",
            f"sentinel sentinel-pass {password}",
            "sentinel resolve-hostnames yes",
            "sentinel announce-hostnames yes",
            f"sentinel monitor {name} {PRIMARY} {PORT} {s.quorum()}",
            f"sentinel auth-pass {name} {password}",
            f"sentinel down-after-milliseconds {name} {s.down_after_seconds * 1000}",
            f"sentinel failover-timeout {name} {s.failover_timeout_seconds * 1000}",
            f"sentinel parallel-syncs {name} 1",
            "",
        ]
    )


def start_script() -> str:
    """The start script of every pod: ``start.sh data|sentinel [server flags]``. It reads the flavor and its
    addresses from the environment (ENGINE, SELF_HOST, NODES, SENTINELS, REDIS_PORT, SENTINEL_PORT, MASTER_NAME,
    INITIAL_PRIMARY, CONFIG_DIR, DATA_DIR)."""
    return (Path(__file__).parent / "redis-start.sh").read_text()


def dns(pod: str, service: str, namespace: str) -> str:
    return f"{pod}.{service}.{namespace}.svc.cluster.local"


def start_env(r: RedisSettings, s: SentinelSettings, namespace: str, service: str) -> list[dict[str, Any]]:
    """The start script's environment in a pod of ``service``: the flavor, its own DNS name and every peer's."""
    nodes = [dns(f"{r.flavor}-{i}", DATA_SERVICE, namespace) for i in range(s.replicas + 1)]  # StatefulSet pods
    sentinels = [dns(f"{SENTINEL_SERVICE}-{i}", SENTINEL_SERVICE, namespace) for i in range(s.sentinels)]
    values = {
        "ENGINE": r.flavor,
        "SELF_HOST": dns("$(POD_NAME)", service, namespace),
        "NODES": " ".join(nodes),
        "SENTINELS": " ".join(sentinels),
        "REDIS_PORT": str(PORT),
        "SENTINEL_PORT": str(SENTINEL_PORT),
        "MASTER_NAME": s.master_name,
        "INITIAL_PRIMARY": nodes[0],
        "CONFIG_DIR": CONFIG_DIR,
        "DATA_DIR": "/data",
    }
    pod_name = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    return [pod_name, *({"name": k, "value": v} for k, v in values.items())]


VOLUMES = [
    {"name": "config", "secret": {"secretName": CONFIG_SECRET}},
    {"name": "scripts", "configMap": {"name": "redis-start"}},
]
SCRIPTS_MOUNT = {"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True}


def data_spec(
    r: RedisSettings, s: SentinelSettings, namespace: str, labels: dict[str, str], exporter: Resources | None = None
) -> dict[str, Any]:
    """The data nodes' StatefulSet ``spec``: the primary and its replicas, one per node, durable."""
    command = ["sh", f"{SCRIPTS_DIR}/start.sh", "data", *durability_flags()]
    containers = [{**data_container(r, command, SCRIPTS_MOUNT), "env": start_env(r, s, namespace, DATA_SERVICE)}]
    if exporter:
        containers.append(exporter_container(exporter, PORT))
    template = kube.pod_template(
        labels,
        containers,
        VOLUMES,
        terminationGracePeriodSeconds=60,
        affinity=kube.spread(labels, s.spread == "required"),
    )
    return {
        "serviceName": DATA_SERVICE,
        "replicas": s.replicas + 1,
        "selector": {"matchLabels": labels},
        "template": template,
        "volumeClaimTemplates": [kube.data_claim_template(r.storage_size, r.storage_class)],
    }


def sentinel_spec(
    r: RedisSettings,
    s: SentinelSettings,
    namespace: str,
    labels: dict[str, str],
    exporter: Resources | None = None,
) -> dict[str, Any]:
    """The Sentinels' StatefulSet ``spec``: one per node, their rewritable config on an emptyDir."""
    probe = ping_probe(r.flavor, SENTINEL_PORT)
    sentinel = kube.container(
        "sentinel",
        IMAGES[r.flavor],
        s.resources,
        command=["sh", f"{SCRIPTS_DIR}/start.sh", "sentinel"],
        env=start_env(r, s, namespace, SENTINEL_SERVICE),
        ports=[{"name": "sentinel", "containerPort": SENTINEL_PORT}],
        livenessProbe={**probe, "initialDelaySeconds": 30, "periodSeconds": 15},
        readinessProbe={**probe, "periodSeconds": 5},
        volumeMounts=[
            {"name": "data", "mountPath": "/data"},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            SCRIPTS_MOUNT,
        ],
    )
    volumes = [{"name": "data", "emptyDir": {}}, *VOLUMES]
    containers = [sentinel, exporter_container(exporter, SENTINEL_PORT)] if exporter else [sentinel]
    return {
        "serviceName": SENTINEL_SERVICE,
        "replicas": s.sentinels,
        "podManagementPolicy": "Parallel",
        "selector": {"matchLabels": labels},
        "template": kube.pod_template(
            labels, containers, volumes, affinity=kube.spread(labels, s.spread == "required")
        ),
    }


def _headless(
    name: str, service: str, port: int, ns: k8s.core.v1.Namespace, labels: dict[str, str], parent: pulumi.Resource
) -> k8s.core.v1.Service:
    """A headless Service whose pods' DNS names resolve before they are ready (the start script needs them)."""
    return k8s.core.v1.Service(
        name,
        metadata={"name": service, "namespace": ns.metadata.name, "labels": labels},
        spec={
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": labels,
            "ports": [{"name": service, "port": port, "targetPort": port}],
        },
        opts=pulumi.ResourceOptions(parent=parent),
    )


def _config(
    name: str,
    r: RedisSettings,
    s: SentinelSettings,
    password: pulumi.Output[str],
    ns: k8s.core.v1.Namespace,
    exporter: Resources | None,
    child: pulumi.ResourceOptions,
) -> tuple[k8s.core.v1.Secret, k8s.core.v1.ConfigMap]:
    """The config Secret (redis.conf, sentinel.conf, the password) and the start script's ConfigMap."""
    files = {
        "redis.conf": password.apply(lambda p: redis_conf(r, p, *replication_lines(s, p))),
        "sentinel.conf": password.apply(lambda p: sentinel_conf(s, p)),
    }
    ports = (PORT, SENTINEL_PORT) if exporter else ()
    config = config_secret(name, ns.metadata.name, password, files, ports, child)
    scripts = k8s.core.v1.ConfigMap(
        f"{name}-start-script",
        metadata={"name": "redis-start", "namespace": ns.metadata.name},
        data={"start.sh": start_script()},
        opts=child,
    )
    return config, scripts


def sentinel_url(password: pulumi.Output[str], r: RedisSettings, s: SentinelSettings, namespace: str) -> pulumi.Output:
    """The JuiceFS Sentinel URL: the master name, every Sentinel's DNS name, one port, the database, and the
    client's failover timing (JuiceFS reads ``read-timeout`` and ``max-retry-backoff`` from the query)."""
    hosts = ",".join(dns(f"{SENTINEL_SERVICE}-{i}", SENTINEL_SERVICE, namespace) for i in range(s.sentinels))
    return pulumi.Output.format(
        "redis://:{0}@{1},{2}:{3}/{4}?read-timeout={5}s&max-retry-backoff={6}s",
        password,
        s.master_name,
        hosts,
        SENTINEL_PORT,
        r.database,
        s.client_read_timeout_seconds,
        s.client_max_retry_backoff_seconds,
    )


def sentinel_engine(
    name: str,
    r: RedisSettings,
    s: SentinelSettings,
    namespace: str,
    ns: k8s.core.v1.Namespace,
    protect: bool,
    parent: pulumi.Resource,
    exporter: Resources | None = None,
) -> MetadataEndpoint:
    """Data nodes and Sentinels sharing one generated password; the metadata URL names the Sentinels."""
    child = pulumi.ResourceOptions(parent=parent)
    password = engine_password(name, child)
    config, scripts = _config(name, r, s, password.result, ns, exporter, child)
    data_labels = kube.labels(r.flavor, "metadata-engine")
    sentinel_labels = kube.labels("redis-sentinel", "metadata-engine")
    data_service = _headless(f"{name}-service", DATA_SERVICE, PORT, ns, data_labels, parent)
    sentinel_service = _headless(
        f"{name}-sentinel-service", SENTINEL_SERVICE, SENTINEL_PORT, ns, sentinel_labels, parent
    )
    data = k8s.apps.v1.StatefulSet(
        f"{name}-redis",
        metadata=kube.workload_metadata(r.flavor, ns.metadata.name, r.resources, data_labels),
        spec=data_spec(r, s, namespace, data_labels, exporter),
        opts=kube.stateful(parent, protect, depends_on=[config, scripts, data_service]),
    )
    sentinels = k8s.apps.v1.StatefulSet(
        f"{name}-sentinel",
        metadata=kube.workload_metadata("redis-sentinel", ns.metadata.name, s.resources, sentinel_labels),
        spec=sentinel_spec(r, s, namespace, sentinel_labels, exporter),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[config, scripts, sentinel_service]),
    )
    kube.budget(f"{name}-budget", "redis", ns.metadata.name, data_labels, parent, [data])
    kube.budget(f"{name}-sentinel-budget", "redis-sentinel", ns.metadata.name, sentinel_labels, parent, [sentinels])
    url = sentinel_url(password.result, r, s, namespace)
    host = pulumi.Output.from_input(f"{SENTINEL_SERVICE}.{namespace}.svc.cluster.local")
    sentinel_password: pulumi.Output[str] = pulumi.Output.secret(password.result)
    return MetadataEndpoint(pulumi.Output.secret(url), host, {"SENTINEL_PASSWORD": sentinel_password})
