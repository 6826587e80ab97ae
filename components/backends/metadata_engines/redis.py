"""Redis as the platform runs it for JuiceFS metadata: the durable configuration every data node gets.

JuiceFS loses files if Redis evicts keys or drops writes, so every data node (a standalone server, a primary
or a replica) runs with ``maxmemory-policy noeviction`` and AOF persistence. The server is Redis or Valkey
(``flavor``), each from its official image (Bitnami's images were frozen in 2025); both read the same
redis.conf and speak the same protocol (JuiceFS's ``redis://``), but Valkey 8 cannot read the data files of
Redis 8 (RDB format 12), so a flavor is chosen once per file system.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random
from pydantic import Field

from ...common import kube, versions
from ...common.sections import Quantity, Resources, Section

PORT = 6379
DURABILITY = {"appendonly": "yes", "maxmemory-policy": "noeviction"}
"""What JuiceFS needs from Redis. Also passed as command-line flags, which override redis.conf and stay visible
to reviewers and policies (the file itself is a Secret)."""
CONFIG_DIR = "/etc/redis"
"""Where the config Secret (redis.conf, password) is mounted."""
EXPORTER_PORT = 9121
EXPORTER_PASSWORDS = "exporter-passwords.json"
"""Config Secret key: the password of each address a redis_exporter scrapes (its ``-redis.password-file``)."""


Flavor = Literal["redis", "valkey"]
IMAGES: dict[str, str] = {"redis": versions.REDIS_IMAGE, "valkey": versions.VALKEY_IMAGE}
"""The official image of each flavor; its programs are ``<flavor>-server``, ``-sentinel`` and ``-cli``."""


class RedisSettings(Section):
    """The Redis (or Valkey) data nodes the platform runs in the cluster (one, or a primary and its replicas)."""

    flavor: Flavor = "redis"
    """The server: `redis` (Redis 8, AGPLv3/RSALv2/SSPLv1) or `valkey` (Valkey 8.1, BSD-3); on AWS the
    ElastiCache engine too. Changing it moves the metadata (docs/runbook.md)."""

    storage_size: Quantity = "10Gi"
    """Size of each Redis data PVC (AOF and RDB files)."""
    storage_class: str | None = None
    """StorageClass for the Redis PVCs; unset uses the cluster default."""
    database: int = Field(1, ge=0, le=15)
    """Redis database number JuiceFS uses."""
    appendfsync: Literal["everysec", "always"] = "everysec"
    """AOF fsync policy: `everysec` loses at most one second of metadata on a crash, `always` none."""
    maxmemory_percent: int = Field(80, ge=10, le=95)
    """Share of the container memory limit Redis may use before refusing writes (never evicting)."""
    resources: Resources = Resources(cpu_request="250m", memory_request="512Mi", memory_limit="2Gi")
    """Requests and limits of each Redis container."""


@dataclass(frozen=True)
class MetadataEndpoint:
    """How JuiceFS clients reach a metadata engine."""

    url: pulumi.Output[str]
    """JuiceFS metadata URL with the password (secret)."""
    host: pulumi.Output[str]
    """The DNS name clients connect to first (the Redis Service, the Sentinels' Service, or the managed
    primary endpoint)."""
    client_env: dict[str, pulumi.Output[str]] = dataclasses.field(default_factory=dict)
    """Environment every JuiceFS client needs besides the URL (secret values): the Sentinels' password, which
    the JuiceFS client reads from SENTINEL_PASSWORD, not from the URL."""


def redis_conf(settings: RedisSettings, password: str, *extra: str) -> str:
    """The redis.conf of a data node: durable (AOF), never evicting, password required; ``extra`` lines
    (replication settings) follow the common ones."""
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
            *extra,
            "",
        ]
    )


def ping_probe(flavor: Flavor, port: int) -> dict[str, Any]:
    """An exec probe that authenticates with the mounted password and expects PONG from ``port`` (the
    flavor's cli; valkey-cli reads REDISCLI_AUTH too)."""
    ping = f'REDISCLI_AUTH="$(cat {CONFIG_DIR}/password)" {flavor}-cli -p {port} ping | grep -q PONG'
    return {"exec": {"command": ["sh", "-c", ping]}, "timeoutSeconds": 5}


def durability_flags() -> list[str]:
    """The durability settings as command-line flags (they override the config file)."""
    return [part for key, value in DURABILITY.items() for part in (f"--{key}", value)]


def data_container(settings: RedisSettings, command: list[str], *mounts: dict[str, Any]) -> dict[str, Any]:
    """A data node's container: the flavor's pinned image, ``command``, ping probes and the data volume."""
    probe = ping_probe(settings.flavor, PORT)
    return kube.container(
        "redis",
        IMAGES[settings.flavor],
        settings.resources,
        command=command,
        ports=[{"name": "redis", "containerPort": PORT}],
        livenessProbe={**probe, "initialDelaySeconds": 30, "periodSeconds": 15},
        readinessProbe={**probe, "periodSeconds": 5},
        volumeMounts=[
            {"name": "data", "mountPath": "/data"},
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            *mounts,
        ],
    )


CONFIG_SECRET = "redis-config"
"""The Secret every Redis and Sentinel pod mounts at CONFIG_DIR."""


def engine_password(name: str, child: pulumi.ResourceOptions) -> random.RandomPassword:
    """The metadata engine's password: one resource name for every in-cluster layout, so changing the layout
    keeps the password (and the URL clients hold stays valid until the new layout serves)."""
    return random.RandomPassword(f"{name}-password", length=40, special=False, opts=child)


def config_secret(
    name: str,
    namespace: pulumi.Input[str],
    password: pulumi.Output[str],
    files: Mapping[str, pulumi.Input[str]],
    exporter_ports: tuple[int, ...],
    child: pulumi.ResourceOptions,
) -> k8s.core.v1.Secret:
    """The config Secret: the layout's config ``files``, the password, and with ``exporter_ports`` the password
    file of the redis_exporter beside each of those ports."""
    data: dict[str, pulumi.Input[str]] = {**files, "password": password}
    if exporter_ports:
        data[EXPORTER_PASSWORDS] = password.apply(lambda p: exporter_passwords(p, *exporter_ports))
    return k8s.core.v1.Secret(
        f"{name}-config",
        metadata={"name": CONFIG_SECRET, "namespace": namespace},
        type="Opaque",
        string_data=data,
        opts=child,
    )


def exporter_passwords(password: str, *ports: int) -> str:
    """The redis_exporter password file: the password of the Redis (or Sentinel) on each local port."""
    return json.dumps({f"redis://localhost:{port}": password for port in ports}, sort_keys=True)


def exporter_container(resources: Resources, port: int) -> dict[str, Any]:
    """A redis_exporter beside the Redis or Sentinel on ``port``: its metrics on 9121 (port `metrics`), the
    password read from the config Secret's password file."""
    health = {"httpGet": {"path": "/health", "port": EXPORTER_PORT}, "timeoutSeconds": 5}
    return kube.container(
        "redis-exporter",
        versions.REDIS_EXPORTER_IMAGE,
        resources,
        args=[
            f"--redis.addr=redis://localhost:{port}",
            f"--redis.password-file={CONFIG_DIR}/{EXPORTER_PASSWORDS}",
            f"--web.listen-address=:{EXPORTER_PORT}",
        ],
        ports=[{"name": "metrics", "containerPort": EXPORTER_PORT}],
        livenessProbe={**health, "initialDelaySeconds": 10, "periodSeconds": 30},
        readinessProbe={**health, "periodSeconds": 10},
        volumeMounts=[{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    )
