"""Platform: the whole storage platform for one stack, each component switchable per stack."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
from pydantic import Field

from .acceptance import AcceptanceSettings, StorageAcceptance, StorageAcceptanceArgs
from .fluid import BucketSource, Fluid, FluidArgs, FluidSettings
from .juicefs import BACKUP_PREFIX, JuiceFS, JuiceFSArgs, JuiceFSSettings, JuiceFSSource
from .local_nvme import LocalNVMe, LocalNVMeArgs, LocalNVMeSettings
from .metadata_engine import MetadataEngine, MetadataEngineArgs, MetadataSettings
from .object_store import ObjectStore, ObjectStoreArgs, ObjectStoreSettings
from .rook_ceph import RookCeph, RookCephArgs, RookCephSettings
from .settings import Problem, Section, SettingsError, load_profile, merge, validate
from .storage_tiers import TIERS, StorageTiers, StorageTiersArgs, TierBackend, TiersSettings
from .training import Training, TrainingArgs, TrainingSettings
from .volcano import Volcano, VolcanoArgs, VolcanoSettings


class ClusterSettings(Section):
    """The target cluster and how stateful resources are guarded."""

    kubernetes_version: str = Field("1.33", pattern=r"^1\.(2[5-9]|3[0-7])$")
    """Kubernetes minor version of the cluster (1.25 to 1.37); rendered objects are validated against it."""
    kubeconfig: str | None = None
    """Path to the kubeconfig for `pulumi up`; unset uses the ambient KUBECONFIG."""
    context: str | None = None
    """kubeconfig context to deploy to; unset uses the current context."""
    protect_stateful_resources: bool = False
    """Set `protect` and `retainOnDelete` on buckets, data volumes and clusters (on for staging and prod)."""


class PlatformSettings(Section):
    """Every setting of a stack, by section."""

    profile: str = "dev"
    """Environment profile in `stacks/` the stack starts from (defaults to the stack name)."""
    cluster: ClusterSettings = ClusterSettings()
    """Target cluster and protection of stateful resources."""
    object_store: ObjectStoreSettings = ObjectStoreSettings()
    """Object store (durable cold copy)."""
    metadata: MetadataSettings = MetadataSettings()
    """Redis metadata engine for JuiceFS."""
    juicefs: JuiceFSSettings = JuiceFSSettings()
    """JuiceFS CSI driver and cache."""
    tiers: TiersSettings = TiersSettings()
    """Tier-to-backend map and StorageClass naming."""
    rook_ceph: RookCephSettings = RookCephSettings()
    """Rook-Ceph cluster, pools and filesystems (warm and checkpoint tiers, RGW)."""
    local_nvme: LocalNVMeSettings = LocalNVMeSettings()
    """TopoLVM node-local NVMe volumes (hot tier)."""
    acceptance: AcceptanceSettings = AcceptanceSettings()
    """fio acceptance Jobs per tier, with thresholds."""
    volcano: VolcanoSettings = VolcanoSettings()
    """Volcano scheduler and team Queues."""
    training: TrainingSettings = TrainingSettings()
    """Kubeflow training operator and its Volcano-scheduled runtimes."""
    fluid: FluidSettings = FluidSettings()
    """Fluid dataset caching."""

    def backends(self) -> dict[str, bool]:
        """Which tier backends the stack enables."""
        return {"juicefs": self.juicefs.enabled, "cephfs": self.rook_ceph.enabled, "topolvm": self.local_nvme.enabled}

    def problems(self) -> list[Problem]:
        """Rules that span sections (each field alone is already valid)."""
        found = self.scheduling_problems()
        enabled = self.backends()
        on = ", ".join(b for b, is_on in enabled.items() if is_on) or "none"
        for tier in TIERS:
            backend = getattr(self.tiers, tier)
            if backend != "none" and not enabled[backend]:
                found.append(
                    Problem(
                        f"tiers.{tier}",
                        f"expected a backend this stack enables ({on})",
                        backend,
                        f"enable the {backend} component or map the tier to another backend (or 'none')",
                    )
                )
        if self.tiers.default_tier and getattr(self.tiers, self.tiers.default_tier) == "none":
            found.append(
                Problem(
                    "tiers.defaultTier", "expected a tier that has a backend", self.tiers.default_tier, "map it first"
                )
            )
        found += self._storage_problems()
        seen: dict[str, str] = {}
        for key, ns in self.namespaces().items():
            if ns in seen:
                found.append(
                    Problem(f"{key}.namespace", f"expected a namespace not used by {seen[ns]}", ns, "pick another")
                )
            seen[ns] = key
        return found

    def _storage_problems(self) -> list[Problem]:
        """Ceph durability rules, Ceph staying off TopoLVM's NVMe disks, and RGW needing Rook-Ceph."""
        found = []
        ceph = self.rook_ceph
        if ceph.enabled:
            found += ceph.problems()
            pattern = ceph.storage.device_filter
            on_nvme = pattern and any(re.search(pattern, d) for d in ("nvme0n1", "nvme1n1", "nvme0n1p1"))
            if self.local_nvme.enabled and on_nvme and not ceph.storage.nodes:
                found.append(
                    Problem(
                        "rookCeph.storage.deviceFilter",
                        "expected a filter that matches no NVMe device while localNvme is enabled",
                        pattern,
                        "Ceph would claim the NVMe disks meant for TopoLVM; list the disks Ceph may use in "
                        "rookCeph.storage.nodes instead",
                    )
                )
        if self.object_store.backend == "ceph-rgw" and not ceph.enabled:
            found.append(
                Problem(
                    "objectStore.backend",
                    "expected minio or s3 when rookCeph is disabled",
                    "ceph-rgw",
                    "enable rookCeph (it runs the RGW object store) or pick another backend",
                )
            )
        return found

    def scheduling_problems(self) -> list[Problem]:
        """Rules of the volcano, training and fluid sections."""
        found = self.volcano.problems()
        t = self.training
        if t.enabled and not self.volcano.enabled:
            found.append(
                Problem("training.enabled", "expected volcano.enabled: true", True, "runtimes gang-schedule on Volcano")
            )
        if t.enabled and self.tiers.checkpoint == "none":
            found.append(
                Problem("tiers.checkpoint", "expected a backend", "none", "training's checkpoint claim uses this tier")
            )
        if t.enabled and t.operator != "trainer-v2" and t.runtimes:
            found.append(
                Problem("training.runtimes", "expected no runtimes", len(t.runtimes), "runtimes need trainer-v2")
            )
        queues = [q.name for q in self.volcano.queues]
        for i, runtime in enumerate(t.runtimes if t.enabled else []):
            if runtime.queue not in queues:
                found.append(
                    Problem(
                        f"training.runtimes[{i}].queue",
                        f"expected one of volcano.queues ({', '.join(queues) or 'none'})",
                        runtime.queue,
                        "add the queue to volcano.queues or pick an existing one",
                    )
                )
        seen: set[tuple[str, str]] = set()
        for i, d in enumerate(self.fluid.datasets if self.fluid.enabled else []):
            if d.runtime == "juicefs" and not self.juicefs.enabled:
                found.append(
                    Problem(
                        f"fluid.datasets[{i}].runtime",
                        "expected a runtime with a backend (JuiceFSRuntime needs juicefs.enabled: true)",
                        d.runtime,
                        "enable juicefs or use runtime 'alluxio' over the object store",
                    )
                )
            if (d.namespace, d.name) in seen:
                found.append(
                    Problem(f"fluid.datasets[{i}].name", "expected a name unique in its namespace", d.name, "rename it")
                )
            seen.add((d.namespace, d.name))
        return found

    def scheduling_namespaces(self) -> dict[str, str]:
        """The namespaces the volcano, training and fluid components create, by settings key."""
        owned = {}
        if self.volcano.enabled:
            owned["volcano"] = self.volcano.namespace
        datasets = {d.namespace for d in self.fluid.datasets} if self.fluid.enabled else set()
        if self.fluid.enabled:
            owned["fluid"] = self.fluid.namespace
            owned.update({f"fluid.datasets.{ns}": ns for ns in sorted(datasets)})
        if self.training.enabled:
            if self.training.operator == "trainer-v2":
                owned["training"] = self.training.namespace
            if self.training.workload_namespace not in datasets:
                owned["training.workloadNamespace"] = self.training.workload_namespace
        return owned

    def namespaces(self) -> dict[str, str]:
        """The namespace each enabled component creates, by settings key."""
        owned = {"objectStore": self.object_store.namespace}
        if self.acceptance.enabled:
            owned["acceptance"] = self.acceptance.namespace
        if self.juicefs.enabled:
            owned.update(metadata=self.metadata.namespace, juicefs=self.juicefs.namespace)
        if self.rook_ceph.enabled:
            owned["rookCeph"] = self.rook_ceph.namespace
        if self.local_nvme.enabled:
            owned["localNvme"] = self.local_nvme.namespace
            if self.local_nvme.pod_mutating_webhook:
                owned["localNvme.certManager"] = self.local_nvme.cert_manager_namespace
        return {**owned, **self.scheduling_namespaces()}


def backup_expiry(juicefs: JuiceFSSettings) -> dict[str, int]:
    """The object-store expiry that enforces the metadata backups' retention."""
    backup = juicefs.metadata_backup
    return {BACKUP_PREFIX: backup.retention_days} if juicefs.enabled and backup.enabled else {}


def load_settings(stack: str, config: Mapping[str, Any]) -> PlatformSettings:
    """Merge code defaults, the stack's profile and its config; raise SettingsError on any bad value."""
    profile = config.get("profile", stack)
    if not isinstance(profile, str):
        raise SettingsError([Problem("profile", "expected a profile name", profile, "e.g. dev, staging or prod")])
    data = merge(load_profile(profile), config)
    settings: PlatformSettings = validate(PlatformSettings, {**data, "profile": profile})
    problems = settings.problems()
    if problems:
        raise SettingsError(problems)
    return settings


@dataclass
class PlatformArgs:
    """Inputs of the Platform."""

    settings: PlatformSettings


class Platform(pulumi.ComponentResource):
    """Object store, metadata engine, JuiceFS and the tier StorageClasses, as the stack's settings say."""

    storage_classes: dict[str, pulumi.Output[str]]
    """StorageClass name per tier."""
    object_store: ObjectStore
    """The object store component."""
    metadata: MetadataEngine | None
    """The Redis metadata engine (with JuiceFS only)."""
    rook_ceph: RookCeph | None
    """The Rook-Ceph cluster (when enabled)."""
    volcano: Volcano | None
    """The Volcano scheduler (when enabled)."""
    fluid: Fluid | None
    """Fluid dataset caching (when enabled)."""

    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:platform:Platform", name, None, opts)
        s = args.settings
        protect = s.cluster.protect_stateful_resources
        child = pulumi.ResourceOptions(parent=self)
        backends: dict[str, TierBackend] = {}
        # Rook-Ceph and TopoLVM first: the ceph-rgw object store runs on Rook-Ceph.
        self.rook_ceph = None
        if s.rook_ceph.enabled:
            rgw = s.object_store.backend == "ceph-rgw"
            self.rook_ceph = RookCeph(f"{name}-rook-ceph", RookCephArgs(s.rook_ceph, protect, rgw), child)
            backends["cephfs"] = self.rook_ceph
        if s.local_nvme.enabled:
            backends["topolvm"] = LocalNVMe(f"{name}-local-nvme", LocalNVMeArgs(s.local_nvme), child)
        gateway = self.rook_ceph.rgw if self.rook_ceph else None
        self.object_store = ObjectStore(
            f"{name}-object-store", ObjectStoreArgs(s.object_store, protect, backup_expiry(s.juicefs), gateway), child
        )
        self.metadata = None
        self._volume: JuiceFSSource | None = None
        if s.juicefs.enabled:
            self.metadata = MetadataEngine(f"{name}-metadata", MetadataEngineArgs(s.metadata, protect), child)
            store = self.object_store
            self._volume = JuiceFSSource(
                s.juicefs.volume_name,
                self.metadata.url,
                store.storage_type,
                store.bucket_url,
                store.access_key,
                store.secret_key,
            )
            backends["juicefs"] = JuiceFS(f"{name}-juicefs", JuiceFSArgs(s.juicefs, self._volume), child)
        tiers = StorageTiers(f"{name}-tiers", StorageTiersArgs(s.tiers, backends), child)
        self.storage_classes = tiers.classes
        if s.acceptance.enabled:
            StorageAcceptance(f"{name}-acceptance", StorageAcceptanceArgs(s.acceptance, tiers.classes), child)
        self._scheduling(name, s, tiers)
        self.register_outputs({"storage_classes": self.storage_classes})

    def _scheduling(self, name: str, s: PlatformSettings, tiers: StorageTiers) -> None:
        """Volcano, then Fluid, then the training operator (its runtimes mount Fluid's dataset claims)."""
        child = pulumi.ResourceOptions(parent=self)
        self.volcano = Volcano(f"{name}-volcano", VolcanoArgs(s.volcano), child) if s.volcano.enabled else None
        self.fluid = None
        if s.fluid.enabled:
            store = self.object_store
            bucket = BucketSource(store.endpoint, store.bucket, store.access_key, store.secret_key)
            self.fluid = Fluid(f"{name}-fluid", FluidArgs(s.fluid, bucket, self._volume), child)
        if s.training.enabled and self.volcano is not None:
            t = s.training
            shared = self.fluid.namespaces.get(t.workload_namespace) if self.fluid else None
            required = [
                d.name
                for d in s.fluid.datasets
                if s.fluid.enabled and s.fluid.data_affinity == "required" and d.namespace == t.workload_namespace
            ]
            args = TrainingArgs(
                t,
                self.volcano.release,
                tiers.classes["checkpoint"],
                shared,
                required,
                s.cluster.protect_stateful_resources,
            )
            Training(f"{name}-training", args, child)
