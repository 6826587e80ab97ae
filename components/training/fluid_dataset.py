"""A Fluid dataset: the Dataset, the runtime that caches it and the DataLoad that pre-warms it, over the
platform's JuiceFS volume (JuiceFSRuntime, mount point ``juicefs:///<path>``) or the object store bucket
(AlluxioRuntime). The platform's Fluid component and a team's workspace both create datasets this way.

Fluid mounts datasets through its own CSI driver (``fuse.csi.fluid.io``) and runs the runtime's FUSE and
worker pods in the dataset's namespace; the dataset's PVC, which Fluid creates, carries the dataset's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..backends.object_stores.bucket import PREFIX
from ..common import kube
from ..common.sections import Cron, DnsLabel, Problem, Quantity, Section
from ..tiers.juicefs import JuiceFSSource

API = "data.fluid.io/v1alpha1"
CSI_DRIVER = "fuse.csi.fluid.io"
CREDENTIALS_SECRET = "fluid-dataset-credentials"
RUNTIME_KIND = {"juicefs": "JuiceFSRuntime", "alluxio": "AlluxioRuntime"}


class CacheLevel(Section):
    """One level of a runtime's tiered cache on each cache node."""

    medium: Literal["MEM", "SSD", "HDD"] = "MEM"
    """Medium of the level (MEM is a tmpfs such as /dev/shm)."""
    path: str = Field("/dev/shm", pattern=r"^/[^,\s]*$")
    """Node directory of the cache."""
    quota: Quantity = "4Gi"
    """Cache capacity of the level on each node."""
    high: float = Field(0.95, gt=0.0, le=1.0)
    """Usage ratio at which eviction starts."""
    low: float = Field(0.7, ge=0.0, lt=1.0)
    """Usage ratio eviction brings the level back down to (below `high`)."""

    def problems(self) -> list[Problem]:
        """Eviction brings usage down from `high` to `low`."""
        if self.low >= self.high:
            return [Problem("low", f"expected a ratio below high ({self.high})", self.low, "eviction stops at low")]
        return []


class DatasetCache(Section):
    """Where a Fluid dataset lives and how it is cached and pre-warmed."""

    path: str = Field("/", pattern=r"^/[^\s]*$")
    """Directory of the dataset in the JuiceFS volume or the bucket."""
    replicas: int = Field(1, ge=1, le=1024)
    """Cache workers (nodes holding the cache)."""
    cache: list[CacheLevel] = [CacheLevel()]
    """Tiered cache levels, fastest first."""
    prewarm: bool = False
    """Load the dataset into the cache once it is bound (DataLoad)."""
    prewarm_paths: list[str] = ["/"]
    """Directories of the dataset to pre-warm."""
    warmup_schedule: Cron | None = None
    """Load `prewarmPaths` into the cache again on this cron schedule (a DataLoad `<name>-warmup` with Fluid's
    `policy: Cron`), e.g. an hour before the nightly runs: a cache evicted since the first load is warm again;
    unset: loaded once (`prewarm`)."""

    def problems(self) -> list[Problem]:
        """A scheduled warm-up re-loads what the pre-warm loads."""
        if self.warmup_schedule is not None and not self.prewarm:
            hint = "the scheduled warm-up loads prewarmPaths again; set prewarm: true (the first load) with it"
            return [Problem("prewarm", "expected true with warmupSchedule", self.prewarm, hint)]
        return []


class DatasetSettings(DatasetCache):
    """One Fluid dataset, its cache runtime and its pre-warm."""

    name: DnsLabel
    """Dataset name; also the name of the PVC pods mount."""
    namespace: DnsLabel = "training"
    """Namespace of the dataset, its runtime pods and its PVC (where the training pods run)."""
    runtime: Literal["juicefs", "alluxio"] = "juicefs"
    """JuiceFSRuntime over the platform's JuiceFS volume, or AlluxioRuntime over the object store bucket."""

    def problems(self) -> list[Problem]:
        """An Alluxio dataset reads one directory of the bucket, never all of it (its keys reach only that)."""
        found = super().problems()
        if self.runtime == "alluxio" and not PREFIX.match(bucket_prefix(self.path)):
            expected = "expected a directory of the bucket in lowercase path segments (e.g. /datasets/imagenet)"
            hint = "the bucket also holds the JuiceFS chunks, the metadata backups and every team's checkpoints"
            found.append(Problem("path", expected, self.path, hint))
        return found


def bucket_prefix(path: str) -> str:
    """The bucket prefix of a dataset directory: ``/datasets/x`` -> ``datasets/x/`` (``/`` -> empty)."""
    stripped = path.strip("/")
    return f"{stripped}/" if stripped else ""


def cache_spec(levels: list[CacheLevel]) -> dict[str, Any]:
    """The ``tieredstore`` of a runtime."""
    return {
        "levels": [
            {"mediumtype": c.medium, "path": c.path, "quota": c.quota, "high": str(c.high), "low": str(c.low)}
            for c in levels
        ]
    }


def _secret_ref(secret: pulumi.Input[str], key: str, option: str | None = None) -> dict[str, Any]:
    return {"name": option or key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def juicefs_mount(d: DatasetCache, secret: pulumi.Input[str], source: JuiceFSSource) -> dict[str, Any]:
    """A Dataset mount of a directory of the platform's JuiceFS volume (Fluid formats/mounts it by the volume's
    name), with the metadata URL and keys from ``secret``."""
    return {
        "name": source.volume_name,
        "mountPoint": f"juicefs://{d.path}",
        "options": {"storage": source.storage, "bucket": source.bucket_url},
        "encryptOptions": [_secret_ref(secret, k) for k in ("metaurl", "access-key", "secret-key")],
    }


def bucket_mount(name: str, d: DatasetCache, secret: pulumi.Input[str], source: BucketSource) -> dict[str, Any]:
    """A Dataset mount of a directory of the object store bucket (path-style: MinIO and in-cluster endpoints
    have no per-bucket DNS names), with the keys from ``secret``."""
    return {
        "name": name,
        "mountPoint": pulumi.Output.concat("s3://", source.bucket, d.path),
        "options": {
            "alluxio.underfs.s3.endpoint": source.endpoint,
            "alluxio.underfs.s3.disable.dns.buckets": "true",
        },
        "encryptOptions": [
            _secret_ref(secret, "access-key", "aws.accessKeyId"),
            _secret_ref(secret, "secret-key", "aws.secretKey"),
        ],
    }


def dataset_spec(
    d: DatasetSettings,
    secret: pulumi.Input[str],
    source: JuiceFSSource | BucketSource,
    tolerations: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The ``spec`` of a Dataset: one mount of the JuiceFS volume or the bucket, credentials from ``secret``;
    Fluid gives the runtime's pods (its FUSE DaemonSet on the nodes that mount the dataset) ``tolerations``."""
    if isinstance(source, JuiceFSSource):
        mount = juicefs_mount(d, secret, source)
    else:
        mount = bucket_mount(d.name, d, secret, source)
    spec: dict[str, Any] = {"accessModes": ["ReadOnlyMany"], "mounts": [mount]}
    if tolerations:
        spec["tolerations"] = list(tolerations)
    return spec


@dataclass
class BucketSource:
    """The object store bucket, as an AlluxioRuntime reaches it."""

    endpoint: pulumi.Input[str]
    bucket: pulumi.Input[str]
    access_key: pulumi.Input[str]
    secret_key: pulumi.Input[str]


def credentials(
    resource_name: str,
    runtime: str,
    namespace: pulumi.Input[str],
    source: JuiceFSSource | BucketSource,
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.Secret:
    """The Secret the datasets of one namespace and runtime read their credentials from."""
    data: dict[str, pulumi.Input[str]] = {"access-key": source.access_key, "secret-key": source.secret_key}
    if isinstance(source, JuiceFSSource):
        data["metaurl"] = source.metaurl
        data.update(source.envs)  # the client's environment, one key per variable
    return k8s.core.v1.Secret(
        resource_name,
        metadata={
            "name": f"{CREDENTIALS_SECRET}-{runtime}",
            "namespace": namespace,
            "labels": kube.labels("fluid", "credentials"),
        },
        type="Opaque",
        string_data={k: pulumi.Output.secret(v) for k, v in data.items()},
        opts=opts,
    )


POD_NETWORK = {"networkMode": "ContainerNetwork"}
"""A runtime part on the pod network (Fluid's default is the host's): NetworkPolicies select it by namespace."""
RUNTIME_PARTS = {"juicefs": ("fuse", "worker"), "alluxio": ("master", "jobMaster", "worker", "jobWorker", "fuse")}
"""The parts of each runtime that run pods."""


def runtime_spec(d: DatasetCache, secret: pulumi.Input[str], source: JuiceFSSource | BucketSource) -> dict[str, Any]:
    """The runtime's ``spec``: cache workers and levels, every part on the pod network; a JuiceFSRuntime's FUSE
    and worker clients also get the client's environment (SENTINEL_PASSWORD with Sentinels) from ``secret``."""
    spec: dict[str, Any] = {"replicas": d.replicas, "tieredstore": cache_spec(d.cache)}
    spec.update({part: dict(POD_NETWORK) for part in RUNTIME_PARTS[runtime_of(source)]})
    if isinstance(source, JuiceFSSource) and source.envs:
        env = [{"name": k, "valueFrom": {"secretKeyRef": {"name": secret, "key": k}}} for k in sorted(source.envs)]
        spec["fuse"]["env"] = env
        spec["worker"]["env"] = env
    return spec


def runtime_of(source: JuiceFSSource | BucketSource) -> str:
    """The runtime that caches a source: JuiceFSRuntime for the JuiceFS volume, AlluxioRuntime for a bucket."""
    return "juicefs" if isinstance(source, JuiceFSSource) else "alluxio"


def dataset(
    name: str,
    suffix: str,
    d: DatasetSettings,
    namespace: pulumi.Input[str],
    secret: pulumi.Input[str],
    source: JuiceFSSource | BucketSource,
    opts: pulumi.ResourceOptions,
    tolerations: Sequence[dict[str, Any]] = (),
) -> k8s.apiextensions.CustomResource:
    """A Dataset (``<name>-dataset-<suffix>``), its runtime and, when pre-warmed, its DataLoad.
    ``opts`` carries the parent, and the fluid release when Fluid is installed too; the runtime's pods tolerate
    ``tolerations``."""
    dataset = k8s.apiextensions.CustomResource(
        f"{name}-dataset-{suffix}",
        api_version=API,
        kind="Dataset",
        metadata={"name": d.name, "namespace": namespace, "labels": kube.labels("fluid", "dataset")},
        spec=dataset_spec(d, secret, source, tolerations),
        opts=opts,
    )
    runtime = k8s.apiextensions.CustomResource(
        f"{name}-runtime-{suffix}",
        api_version=API,
        kind=RUNTIME_KIND[runtime_of(source)],
        # A runtime binds to the Dataset of the same name and namespace.
        metadata={"name": d.name, "namespace": namespace, "labels": kube.labels("fluid", "runtime")},
        spec=runtime_spec(d, secret, source),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[dataset])),
    )
    after = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[dataset, runtime]))
    loads: list[tuple[str, str | None]] = [("prewarm", None)] if d.prewarm else []
    loads += [("warmup", d.warmup_schedule)] if d.warmup_schedule else []
    for role, schedule in loads:
        k8s.apiextensions.CustomResource(
            f"{name}-dataload-{suffix}" if role == "prewarm" else f"{name}-warmup-{suffix}",
            api_version=API,
            kind="DataLoad",
            metadata={"name": f"{d.name}-{role}", "namespace": namespace, "labels": kube.labels("fluid", "dataload")},
            spec=dataload_spec(d, schedule),
            opts=after,
        )
    return dataset


def dataload_spec(d: DatasetSettings, schedule: str | None) -> dict[str, Any]:
    """A DataLoad of the dataset's ``prewarmPaths``: once when the dataset is bound, or on ``schedule`` (Fluid's
    ``policy: Cron``)."""
    spec: dict[str, Any] = {
        "dataset": {"name": d.name, "namespace": d.namespace},
        "loadMetadata": True,
        "target": [{"path": p} for p in d.prewarm_paths],
    }
    if schedule:
        spec.update(policy="Cron", schedule=schedule)
    return spec
