"""ElastiCache: the managed JuiceFS metadata engine for stacks on AWS, through pulumi-aws.

A replication group (cluster mode disabled, which JuiceFS needs) with a primary and replicas in several
Availability Zones, automatic Multi-AZ failover, TLS in transit (``rediss://``), encryption at rest, an auth
token from pulumi-random, daily snapshots kept for a number of days, and a parameter group that sets
``maxmemory-policy noeviction``. ElastiCache offers no AOF with Multi-AZ: a node's loss is covered by the
replicas and automatic failover, and the snapshots and the platform's metadata backups bound what a loss of
the whole group costs.
"""

from __future__ import annotations

from typing import Annotated, Any

import pulumi
import pulumi_random as random
from pydantic import Field

from ...common import kube, versions
from ...common.sections import KmsKeyArn, Problem, Section
from .redis import DURABILITY, PORT, MetadataEndpoint, RedisSettings

_HOUR = r"([01][0-9]|2[0-3]):[0-5][0-9]"


class ElastiCacheSettings(Section):
    """An Amazon ElastiCache replication group (engine Redis OSS or Valkey, the `flavor`) with Multi-AZ failover."""

    node_type: str = Field("cache.r7g.large", pattern=r"^cache\.[a-z0-9]+\.[a-z0-9]+$")
    """Node type of the primary and each replica (memory-optimized `cache.r7g.*` suits metadata)."""
    replicas: int = Field(2, ge=0, le=5)
    """Replicas of the primary, in other Availability Zones; one takes over when the primary fails."""
    subnet_ids: list[Annotated[str, Field(pattern=r"^subnet-[0-9a-f]+$")]] = []
    """Subnets of the replication group, in two or more Availability Zones (the cluster's private subnets)."""
    security_group_ids: list[Annotated[str, Field(pattern=r"^sg-[0-9a-f]+$")]] = []
    """Security groups that admit the cluster's nodes to port 6379."""
    snapshot_retention_days: int = Field(7, ge=1, le=35)
    """Days the daily snapshots are kept."""
    snapshot_window: str = Field(
        "03:00-04:00", pattern=r"^([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9]$"
    )
    """Daily UTC window of the snapshot (`hh:mm-hh:mm`, at least an hour)."""
    alarm_actions: list[
        Annotated[str, Field(pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:[0-9]{12}:[A-Za-z0-9_.-]+$")]
    ] = []
    """SNS topics the CloudWatch alarms notify (on alarm and on recovery); empty: the alarms only show in CloudWatch."""
    memory_warning_percent: float = Field(85.0, gt=0, le=100)
    """Memory used of the node's maxmemory at which the warning alarm fires, %."""
    memory_critical_percent: float = Field(95.0, gt=0, le=100)
    """Memory used of the node's maxmemory at which the critical alarm fires, % (above the warning level)."""
    cpu_alarm_percent: float = Field(90.0, gt=0, le=100)
    """Redis engine thread CPU at which the CPU alarm fires (15 minutes above it), %."""
    replication_lag_alarm_seconds: float = Field(30.0, gt=0, le=3600)
    """A replica's lag behind the primary at which its alarm fires (5 minutes above it), s."""
    engine_version: str | None = Field(None, pattern=r"^[0-9]+\.[0-9]+$")
    """Engine version (`major.minor`); unset: the pinned one of the flavor (components/common/versions.py). A newer
    minor upgrades in place (in the maintenance window unless `applyImmediately`); another major than the pinned
    parameter group family's is refused; a lower version makes AWS create the group anew (the diff blocks it)."""
    kms_key_id: KmsKeyArn | None = None
    """Customer-managed KMS key (ARN) that encrypts the group at rest; unset: the AWS-owned key. Set it before the
    group exists: changing it creates the group anew (the diff blocks it)."""
    apply_immediately: bool = False
    """Apply a change (node type, engine version, parameters) at once, restarting nodes now; off: AWS applies it in
    the group's next maintenance window (the diff says so)."""
    final_snapshot: bool = True
    """Take a snapshot `<name>-final` when the replication group is deleted (a replace or a destroy)."""

    def problems(self) -> list[Problem]:
        """The critical memory level is above the warning level."""
        if self.memory_critical_percent > self.memory_warning_percent:
            return []
        expected = f"expected above memoryWarningPercent ({self.memory_warning_percent:g})"
        return [Problem("memoryCriticalPercent", expected, self.memory_critical_percent, "critical is the worse level")]


def engine_version_problem(flavor: str, e: ElastiCacheSettings) -> Problem | None:
    """An engine version of another major than the pinned parameter group family's."""
    _, pinned, family = versions.ELASTICACHE_ENGINES[flavor]
    if e.engine_version is None or e.engine_version.split(".")[0] == pinned.split(".")[0]:
        return None
    return Problem(
        "elasticache.engineVersion",
        f"expected a {flavor} {pinned.split('.')[0]}.x version (the parameter group family {family})",
        e.engine_version,
        "another major needs another parameter group family: move the pin in components/common/versions.py",
    )


def parameters() -> list[dict[str, str]]:
    """The parameter group's settings: never evict a key (JuiceFS loses files if Redis evicts)."""
    return [{"name": "maxmemory-policy", "value": DURABILITY["maxmemory-policy"]}]


def elasticache_engine(
    name: str, r: RedisSettings, e: ElastiCacheSettings, protect: bool, parent: pulumi.Resource
) -> MetadataEndpoint:
    """The replication group, its subnet and parameter groups, and a TLS URL with the generated auth token."""
    import pulumi_aws as aws  # only stacks that use ElastiCache pay for importing pulumi-aws

    child = pulumi.ResourceOptions(parent=parent)
    # ElastiCache auth tokens: 16-128 printable characters, none of @ " /.
    token = random.RandomPassword(f"{name}-auth-token", length=64, special=False, opts=child)
    subnets = aws.elasticache.SubnetGroup(f"{name}-subnets", subnet_ids=e.subnet_ids, opts=child)
    engine, pinned, family = versions.ELASTICACHE_ENGINES[r.flavor]
    params = aws.elasticache.ParameterGroup(f"{name}-parameters", family=family, parameters=parameters(), opts=child)
    group = aws.elasticache.ReplicationGroup(
        f"{name}-replication-group",
        description="JuiceFS metadata of the AI storage platform",
        engine=engine,
        engine_version=e.engine_version or pinned,
        node_type=e.node_type,
        num_cache_clusters=e.replicas + 1,
        automatic_failover_enabled=e.replicas > 0,
        multi_az_enabled=e.replicas > 0,
        transit_encryption_enabled=True,
        at_rest_encryption_enabled=True,
        kms_key_id=e.kms_key_id,
        auth_token=token.result,
        parameter_group_name=params.name,
        subnet_group_name=subnets.name,
        security_group_ids=e.security_group_ids,
        snapshot_retention_limit=e.snapshot_retention_days,
        snapshot_window=e.snapshot_window,
        apply_immediately=e.apply_immediately,
        final_snapshot_identifier=f"{name}-final" if e.final_snapshot else None,
        port=PORT,
        opts=kube.stateful(parent, protect),
    )
    alarms(name, group.id, e, child)
    host = group.primary_endpoint_address
    url = pulumi.Output.format("rediss://:{0}@{1}:{2}/{3}", token.result, host, PORT, r.database)
    return MetadataEndpoint(pulumi.Output.secret(url), host)


RUNBOOK = f"{versions.DOCS_URL}/alerts.md#elasticache-cloudwatch-alarms"
"""Where each alarm's description sends the person it pages (docs/alerts.md, this release)."""


def alarms(name: str, group_id: pulumi.Input[str], e: ElastiCacheSettings, opts: pulumi.ResourceOptions) -> list[Any]:
    """The CloudWatch alarms of each node of the group (see the module's docs)."""
    import pulumi_aws as aws

    warning, critical = e.memory_warning_percent, e.memory_critical_percent
    made = []
    for index in range(1, e.replicas + 2):
        node = pulumi.Output.format("{0}-{1}", group_id, f"{index:03d}")
        checks = [
            ("memory-warning", "DatabaseMemoryUsagePercentage", warning, 5),
            ("memory-critical", "DatabaseMemoryUsagePercentage", critical, 5),
            ("cpu", "EngineCPUUtilization", e.cpu_alarm_percent, 15),
            # every member: after a failover any of them may be a replica (the primary reports no lag: missing data)
            ("replication-lag", "ReplicationLag", e.replication_lag_alarm_seconds, 5),
        ]
        for check, metric, threshold, minutes in checks:
            made.append(
                aws.cloudwatch.MetricAlarm(
                    f"{name}-{index:03d}-{check}",
                    alarm_description=f"JuiceFS metadata (ElastiCache) node {index:03d}: {metric} above {threshold:g}; "
                    f"runbook: {RUNBOOK}",
                    namespace="AWS/ElastiCache",
                    metric_name=metric,
                    dimensions={"CacheClusterId": node},
                    statistic="Average",
                    period=60,
                    evaluation_periods=minutes,
                    comparison_operator="GreaterThanThreshold",
                    threshold=threshold,
                    treat_missing_data="breaching" if metric == "DatabaseMemoryUsagePercentage" else "missing",
                    alarm_actions=list(e.alarm_actions),
                    ok_actions=list(e.alarm_actions),
                    opts=opts,
                )
            )
    return made
