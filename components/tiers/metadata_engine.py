"""MetadataEngine: the JuiceFS metadata engine, chosen per stack, owned by the package, configured for durability.

Every file of the cold tier is reachable only through this engine, so the stack chooses its layout on purpose:

* ``standalone``: one Redis server with a data volume (dev clusters);
* ``sentinel``: a Redis primary, its replicas and three Sentinels in the cluster, each on its own node
  (``redis_sentinel``); clients find the primary through the Sentinels;
* ``elasticache``: Amazon ElastiCache with Multi-AZ failover and TLS, for S3 stacks (``elasticache``).

Each in-cluster layout runs Redis or Valkey (``flavor``), and ElastiCache runs the engine of that name.

Moving a file system to another engine or flavor moves its metadata (dump, load, fsck: see docs/runbook.md), so
a protected stack refuses a change of either that it was not told about (``check_migration``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s

from ..backends.metadata_engines.elasticache import ElastiCacheSettings, elasticache_engine, engine_version_problem
from ..backends.metadata_engines.redis import (
    CONFIG_SECRET,
    PORT,
    MetadataEndpoint,
    RedisSettings,
    config_secret,
    data_container,
    durability_flags,
    engine_password,
    exporter_container,
    redis_conf,
)
from ..backends.metadata_engines.redis_sentinel import SentinelSettings, sentinel_engine
from ..common import kube
from ..common.sections import DnsLabel, Problem, Resources, SettingsError

Engine = Literal["standalone", "sentinel", "elasticache"]
RUNBOOK = "docs/runbook.md#move-the-metadata-to-another-engine"


class MetadataSettings(RedisSettings):
    """The JuiceFS metadata engine: its layout, and the Redis data nodes it runs in the cluster."""

    engine: Engine = "sentinel"
    """`standalone` (one Redis, dev), `sentinel` (primary, replicas and Sentinels in the cluster) or `elasticache`
    (managed, Multi-AZ, S3 stacks)."""
    namespace: DnsLabel = "juicefs-meta"
    """Namespace of the in-cluster Redis (standalone or sentinel)."""
    sentinel: SentinelSettings = SentinelSettings()
    """Replicas, Sentinels and failover timing (engine `sentinel`)."""
    elasticache: ElastiCacheSettings = ElastiCacheSettings()
    """The managed replication group (engine `elasticache`)."""
    accept_node_loss_risk: bool = False
    """Allow, in a protected stack, a layout that cannot survive the loss of one node (standalone, fewer than
    2 replicas or 3 Sentinels, or pods allowed to share a node)."""
    migrated_from: Literal["standalone", "sentinel", "elasticache", "redis", "valkey"] | None = None
    """The engine or flavor this stack's metadata was moved from by the runbook's procedure; lets a protected
    stack change `engine` or `flavor`, one at a time (see docs/runbook.md)."""

    def problems(self) -> list[Problem]:
        """Replication settings that contradict each other; the managed engine needs its network."""
        found = []
        sentinel = self.sentinel
        if self.engine == "sentinel" and sentinel.min_replicas_to_write > sentinel.replicas:
            found.append(
                Problem(
                    "sentinel.minReplicasToWrite",
                    f"expected at most sentinel.replicas ({sentinel.replicas})",
                    sentinel.min_replicas_to_write,
                    "the primary would refuse every write",
                )
            )
        if self.engine == "elasticache":
            found += [p for p in [engine_version_problem(self.flavor, self.elasticache)] if p]
            found += [
                Problem(f"elasticache.{key}", "expected at least one", [], hint)
                for key, value, hint in (
                    ("subnetIds", self.elasticache.subnet_ids, "the replication group's subnets, in 2+ zones"),
                    ("securityGroupIds", self.elasticache.security_group_ids, "groups that admit the cluster"),
                )
                if not value
            ]
        return found

    def node_loss_risks(self) -> list[Problem]:
        """Layouts that cannot survive the loss of one node (refused in protected stacks unless opted in)."""
        s, e = self.sentinel, self.elasticache
        layouts: dict[str, list[tuple[str, Any, bool, str, str]]] = {
            "standalone": [
                ("engine", self.engine, True, "expected sentinel or elasticache", "one Redis pod holds all")
            ],
            "sentinel": [
                ("sentinel.replicas", s.replicas, s.replicas < 2, "expected at least 2", "a replica takes over"),
                ("sentinel.sentinels", s.sentinels, s.sentinels < 3, "expected at least 3", "a majority must remain"),
                ("sentinel.spread", s.spread, s.spread != "required", "expected required", "pods can share a node"),
            ],
            "elasticache": [("elasticache.replicas", e.replicas, e.replicas < 1, "expected at least 1", "no failover")],
        }
        risks = layouts[self.engine]
        accept = "set metadata.acceptNodeLossRisk: true to accept the risk"
        return [
            Problem(key, expected, got, f"{why} when a node is lost; {accept}")
            for key, got, risky, expected, why in risks
            if risky
        ]


def statefulset_spec(s: MetadataSettings, labels: dict[str, str], exporter: Resources | None = None) -> dict[str, Any]:
    """The standalone Redis StatefulSet's ``spec``: one server with the config Secret's redis.conf, the
    durability flags on its command line, ping probes and a data volume (and a redis_exporter with ``exporter``)."""
    containers = [data_container(s, [f"{s.flavor}-server", "/etc/redis/redis.conf", *durability_flags()])]
    if exporter:
        containers.append(exporter_container(exporter, PORT))
    config = {"name": "config", "secret": {"secretName": CONFIG_SECRET}}
    return {
        "serviceName": "redis",
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": kube.pod_template(labels, containers, [config], terminationGracePeriodSeconds=60),
        "volumeClaimTemplates": [kube.data_claim_template(s.storage_size, s.storage_class)],
    }


def standalone_engine(
    name: str,
    s: MetadataSettings,
    ns: k8s.core.v1.Namespace,
    protect: bool,
    parent: pulumi.Resource,
    exporter: Resources | None = None,
) -> MetadataEndpoint:
    """One Redis server with a password, AOF persistence and a data volume, behind the `redis` Service."""
    child = pulumi.ResourceOptions(parent=parent)
    password = engine_password(name, child)
    files = {"redis.conf": password.result.apply(lambda p: redis_conf(s, p))}
    config = config_secret(name, ns.metadata.name, password.result, files, (PORT,) if exporter else (), child)
    labels = kube.labels(s.flavor, "metadata-engine")
    service = k8s.core.v1.Service(
        f"{name}-service",
        metadata={"name": "redis", "namespace": ns.metadata.name, "labels": labels},
        spec={"selector": labels, "ports": [{"name": "redis", "port": PORT, "targetPort": PORT}]},
        opts=child,
    )
    k8s.apps.v1.StatefulSet(
        f"{name}-redis",
        metadata=kube.workload_metadata(s.flavor, ns.metadata.name, s.resources, labels),
        spec=statefulset_spec(s, labels, exporter),
        opts=kube.stateful(parent, protect, depends_on=[config, service]),
    )
    host = pulumi.Output.concat("redis.", ns.metadata.name, ".svc.cluster.local")
    url = pulumi.Output.format("redis://:{0}@{1}:{2}/{3}", password.result, host, PORT, s.database)
    return MetadataEndpoint(pulumi.Output.secret(url), host)


def previous_engine(outputs: Mapping[str, Any]) -> str | None:
    """The engine a stack's last update deployed, from its outputs (stacks deployed before the engine was a
    choice exported only `metadataService`, and ran one Redis)."""
    if outputs.get("metadataEngine"):
        return str(outputs["metadataEngine"])
    return "standalone" if outputs.get("metadataService") else None


def previous_flavor(outputs: Mapping[str, Any]) -> str | None:
    """The flavor a stack's last update deployed: its `metadataFlavor` output; stacks deployed before Valkey
    was a choice ran Redis."""
    if outputs.get("metadataFlavor"):
        return str(outputs["metadataFlavor"])
    return "redis" if previous_engine(outputs) else None


def migration_problem(
    previous: str | None, s: MetadataSettings, protected: bool, previous_flavor: str | None = None
) -> Problem | None:
    """A change of engine or flavor a protected stack was not told about: it would point every client at an
    empty engine while the file system's metadata stays in the old one (and Valkey 8 cannot even read Redis 8's
    data files)."""
    if not protected:
        return None
    for key, before, now in _moves(previous, s, previous_flavor):
        if s.migrated_from == before:
            continue
        return Problem(
            f"metadata.{key}",
            f"expected {before} (the {key} that holds this file system's metadata)",
            now,
            f"moving the metadata is a procedure, not a setting: follow {RUNBOOK} (dump, load, fsck), then set "
            f"metadata.migratedFrom: {before}",
        )
    return None


@dataclass
class MetadataEngineArgs:
    """Inputs of a MetadataEngine."""

    settings: MetadataSettings
    protect: bool = False
    """Protect and retain the Redis data volumes (and the managed replication group)."""
    previous_engine: pulumi.Input[str | None] = None
    """The engine the stack's last update deployed (its `metadataEngine` output); a protected stack refuses to
    change it unless `migratedFrom` names it."""
    previous_flavor: pulumi.Input[str | None] = None
    """The flavor the stack's last update deployed (its `metadataFlavor` output), guarded the same way."""
    exporter: Resources | None = None
    """Run a redis_exporter (metrics on port 9121) beside every Redis and Sentinel, with these resources."""


class MetadataEngine(pulumi.ComponentResource):
    """The JuiceFS metadata engine in the layout the settings choose."""

    engine: str
    """The layout: `standalone`, `sentinel` or `elasticache`."""
    flavor: str
    """The server: `redis` or `valkey`."""
    host: pulumi.Output[str]
    """The DNS name clients connect to first (Redis, the Sentinels, or the managed primary endpoint)."""
    url: pulumi.Output[str]
    """JuiceFS metadata URL with the password (secret); it resolves only once the migration guard passed."""
    client_env: dict[str, pulumi.Output[str]]
    """Environment every JuiceFS client needs besides the URL (secret): SENTINEL_PASSWORD with Sentinels."""

    def __init__(self, name: str, args: MetadataEngineArgs, opts: pulumi.ResourceOptions | None = None):
        s = args.settings
        # Every child waits for the guard: a refused change of engine creates nothing and moves no client.
        previous = pulumi.Output.all(args.previous_engine, args.previous_flavor)
        guard = previous.apply(lambda p: check_migration(p[0], s, args.protect, p[1]))
        gated = pulumi.ResourceOptions(transformations=[_after(guard)])
        super().__init__(
            "ai-storage:metadata_engine:MetadataEngine", name, None, pulumi.ResourceOptions.merge(opts, gated)
        )
        self.engine, self.flavor = s.engine, s.flavor
        if s.engine == "elasticache":
            endpoint = elasticache_engine(name, s, s.elasticache, args.protect, self)
        else:
            ns = kube.namespace(f"{name}-ns", s.namespace, "restricted", self)
            if s.engine == "standalone":
                endpoint = standalone_engine(name, s, ns, args.protect, self, args.exporter)
            else:
                endpoint = sentinel_engine(name, s, s.sentinel, s.namespace, ns, args.protect, self, args.exporter)
        self.host = endpoint.host
        self.url = pulumi.Output.all(guard, endpoint.url).apply(lambda both: both[1])
        self.client_env = endpoint.client_env
        self.register_outputs({"engine": self.engine, "flavor": self.flavor, "host": self.host, "url": self.url})


def check_migration(
    previous: str | None, s: MetadataSettings, protected: bool, previous_flavor: str | None = None
) -> list[pulumi.Resource]:
    """Raise the SettingsError of a refused change of engine or flavor; warn about an allowed one. No
    dependencies."""
    problem = migration_problem(previous, s, protected, previous_flavor)
    if problem is not None:
        raise SettingsError([problem])
    for key, before, now in _moves(previous, s, previous_flavor):
        pulumi.log.warn(f"metadata {key} changes from {before} to {now}: see {RUNBOOK}")
    return []


def _moves(previous: str | None, s: MetadataSettings, previous_flavor: str | None) -> list[tuple[str, str, str]]:
    """(key, deployed, configured) of the engine and the flavor where a deployed one differs from the setting."""
    pairs = (("engine", previous, s.engine), ("flavor", previous_flavor, s.flavor))
    return [(key, before, now) for key, before, now in pairs if before not in (None, now)]


def _after(guard: pulumi.Output[list[pulumi.Resource]]) -> Any:
    """A transformation (run by the SDK for the component and each child) that makes a resource wait for
    ``guard``, and fail with it."""

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult:
        waits = pulumi.ResourceOptions(depends_on=guard)
        return pulumi.ResourceTransformationResult(args.props, pulumi.ResourceOptions.merge(args.opts, waits))

    return transform
