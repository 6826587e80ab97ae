"""Fluid: dataset caching close to the GPUs, over the platform's JuiceFS volume or its object store.

The fluid chart is a Helm release whose ``namespace`` value overrides the release namespace; the chart does
not create it, so it is created here. Each dataset is a Dataset, its runtime (JuiceFSRuntime over the JuiceFS
volume, mount point ``juicefs:///<path>``; or AlluxioRuntime over the bucket) with a tiered cache, and a
DataLoad when it is pre-warmed. Fluid mounts datasets through its own CSI driver (``fuse.csi.fluid.io``) and
runs the runtime's FUSE and worker pods in the dataset's namespace, so those namespaces are privileged.
The dataset's PVC, which Fluid creates, carries the dataset's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pydantic import Field

from . import kube, versions
from .juicefs import JuiceFSSource
from .section import DnsLabel, Problem, Quantity, Section

API = "data.fluid.io/v1alpha1"
CSI_DRIVER = "fuse.csi.fluid.io"
CREDENTIALS_SECRET = "fluid-dataset-credentials"
RUNTIME_KIND = {"juicefs": "JuiceFSRuntime", "alluxio": "AlluxioRuntime"}
_AFFINITY_PREFERRED = [
    {"name": "fluid.io/node", "weight": 100},
    {"name": "topology.kubernetes.io/zone", "weight": 50},
    {"name": "topology.kubernetes.io/region", "weight": 20},
]


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


class DatasetSettings(DatasetCache):
    """One Fluid dataset, its cache runtime and its pre-warm."""

    name: DnsLabel
    """Dataset name; also the name of the PVC pods mount."""
    namespace: DnsLabel = "training"
    """Namespace of the dataset, its runtime pods and its PVC (where the training pods run)."""
    runtime: Literal["juicefs", "alluxio"] = "juicefs"
    """JuiceFSRuntime over the platform's JuiceFS volume, or AlluxioRuntime over the object store bucket."""


class FluidSettings(Section):
    """The Fluid controllers and the datasets they cache."""

    enabled: bool = False
    """Install Fluid and create the datasets."""
    namespace: DnsLabel = "fluid-system"
    """Namespace of the Fluid controllers, webhook and CSI plugin."""
    data_affinity: Literal["preferred", "required"] = "preferred"
    """Place dataset pods on the nodes caching it: `preferred`, or `required` (runtimes get the sched label)."""
    datasets: list[DatasetSettings] = []
    """Datasets to create."""

    def problems(self) -> list[Problem]:
        """A dataset name is unique in its namespace (it names the Dataset, the runtime and the claim)."""
        seen: set[tuple[str, str]] = set()
        found = []
        for i, d in enumerate(self.datasets if self.enabled else []):
            if (d.namespace, d.name) in seen:
                found.append(
                    Problem(f"datasets[{i}].name", "expected a name unique in its namespace", d.name, "rename it")
                )
            seen.add((d.namespace, d.name))
        return found


def chart_values(settings: FluidSettings) -> dict[str, Any]:
    """Helm values of the fluid release."""
    affinity: dict[str, Any] = {"preferred": _AFFINITY_PREFERRED}
    if settings.data_affinity == "required":
        affinity["required"] = ["fluid.io/node"]
    used = {d.runtime for d in settings.datasets}
    runtime: dict[str, Any] = {
        # Fluid starts a runtime controller on demand; run the ones our datasets use from the start.
        kind: {"enabled": True}
        for kind in sorted(used)
    }
    if "juicefs" in used:
        # The same JuiceFS client as the rest of the platform.
        repo, tag = versions.JUICEFS_IMAGE.rsplit(":", 1)
        prefix, image = repo.rsplit("/", 1)
        runtime["juicefs"]["fuse"] = {"ceimagePrefix": prefix, "ceimageName": image, "ceimageTag": tag}
    return {
        "namespace": settings.namespace,
        "runtime": runtime,
        "webhook": {
            # Apply the plugin profile below on upgrades too, not only when the ConfigMap is first created.
            "forceReplacePluginsProfile": True,
            "pluginsProfile": {
                "pluginConfig": [
                    # The plugin's args are a YAML document in a string.
                    {"name": "NodeAffinityWithCache", "args": yaml.safe_dump(affinity, sort_keys=False)},
                ]
            },
        },
    }


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


def dataset_spec(d: DatasetSettings, secret: pulumi.Input[str], source: JuiceFSSource | BucketSource) -> dict[str, Any]:
    """The ``spec`` of a Dataset: one mount of the JuiceFS volume or the bucket, credentials from ``secret``."""
    if isinstance(source, JuiceFSSource):
        mount = juicefs_mount(d, secret, source)
    else:
        mount = bucket_mount(d.name, d, secret, source)
    return {"accessModes": ["ReadOnlyMany"], "mounts": [mount]}


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
) -> k8s.apiextensions.CustomResource:
    """A Dataset (``<name>-dataset-<suffix>``), its runtime and, when pre-warmed, its DataLoad.
    ``opts`` carries the parent, and the fluid release when Fluid is installed too."""
    dataset = k8s.apiextensions.CustomResource(
        f"{name}-dataset-{suffix}",
        api_version=API,
        kind="Dataset",
        metadata={"name": d.name, "namespace": namespace, "labels": kube.labels("fluid", "dataset")},
        spec=dataset_spec(d, secret, source),
        opts=opts,
    )
    runtime = k8s.apiextensions.CustomResource(
        f"{name}-runtime-{suffix}",
        api_version=API,
        kind=RUNTIME_KIND[runtime_of(source)],
        # A runtime binds to the Dataset of the same name and namespace.
        metadata={"name": d.name, "namespace": namespace, "labels": kube.labels("fluid", "runtime")},
        spec={"replicas": d.replicas, "tieredstore": cache_spec(d.cache)},
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[dataset])),
    )
    if d.prewarm:
        k8s.apiextensions.CustomResource(
            f"{name}-dataload-{suffix}",
            api_version=API,
            kind="DataLoad",
            metadata={"name": f"{d.name}-prewarm", "namespace": namespace, "labels": kube.labels("fluid", "dataload")},
            spec={
                "dataset": {"name": d.name, "namespace": d.namespace},
                "loadMetadata": True,
                "target": [{"path": p} for p in d.prewarm_paths],
            },
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[dataset, runtime])),
        )
    return dataset


@dataclass
class FluidArgs:
    """Inputs of Fluid."""

    settings: FluidSettings
    bucket: BucketSource
    juicefs: JuiceFSSource | None = None
    """The JuiceFS volume (None when JuiceFS is disabled: no JuiceFSRuntime then)."""


class Fluid(pulumi.ComponentResource):
    """The fluid chart, and per dataset a Dataset, its runtime and its DataLoad."""

    namespaces: dict[str, k8s.core.v1.Namespace]
    """The dataset namespaces this component created, by name."""
    datasets: list[pulumi.Output[str]]
    """Names of the Datasets (and of their PVCs)."""

    def __init__(self, name: str, args: FluidArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:fluid:Fluid", name, None, opts)
        s = args.settings
        # privileged: the CSI plugin DaemonSet mounts FUSE file systems on the node (privileged, hostPath).
        ns = kube.namespace(f"{name}-ns", s.namespace, "privileged", self)
        pin = versions.FLUID
        release = kube.release(
            f"{name}-release", pin, ns.metadata.name, chart_values(s), self, skip_await=False, timeout=600
        )
        self.namespaces = {}
        secrets: dict[tuple[str, str], k8s.core.v1.Secret] = {}
        self.datasets = []
        for d in s.datasets:
            if d.namespace not in self.namespaces:
                # privileged: Fluid runs each runtime's FUSE pods (privileged) in the dataset's namespace.
                ns_name = f"{name}-ns-{d.namespace}"
                self.namespaces[d.namespace] = kube.namespace(ns_name, d.namespace, "privileged", self)
            dns = self.namespaces[d.namespace]
            source = args.juicefs if d.runtime == "juicefs" else args.bucket
            if source is None:
                raise TypeError(f"FluidArgs.juicefs is required for dataset {d.name!r} with runtime juicefs")
            key = (d.namespace, d.runtime)
            if key not in secrets:
                secrets[key] = credentials(
                    f"{name}-credentials-{d.namespace}-{d.runtime}",
                    d.runtime,
                    dns.metadata.name,
                    source,
                    pulumi.ResourceOptions(parent=self),
                )
            secret = secrets[key]
            after_release = pulumi.ResourceOptions(parent=self, depends_on=[release])
            suffix = f"{d.namespace}-{d.name}"
            ds = dataset(name, suffix, d, dns.metadata.name, secret.metadata.name, source, after_release)
            self.datasets.append(ds.metadata["name"])
        self.register_outputs({"datasets": self.datasets})
