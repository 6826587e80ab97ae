"""Stack settings: the loader, the platform's settings tree and the rules that span its sections.

Settings flow one way: code defaults < ``stacks/<profile>.yaml`` < ``Pulumi.<stack>.yaml``, parsed once into a
frozen ``PlatformSettings``. A bad value is rejected before any resource is registered (see ``sections``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pulumi
from pydantic import Field

from ..backends.object_stores.s3 import with_provider_region
from ..common.sections import DnsLabel, Problem, ResourceRef, Section, SettingsError, merge, validate
from ..observability.monitoring import MonitoringSettings
from ..protection.checkpoints import CheckpointProtection
from ..teams.namespace_rules import team_namespace_problems
from ..teams.network_policies import NetworkPolicySettings
from ..teams.tenants import TeamsSettings, team_problems
from ..tiers import registry
from ..tiers.acceptance import AcceptanceSettings
from ..tiers.capacity import CapacitySettings, capacity_problems
from ..tiers.decision_records import checkpoint_sizing_problems, mds_sizing_problems
from ..tiers.efs import EfsSettings
from ..tiers.fsx_lustre import FsxLustreSettings
from ..tiers.juicefs import JuiceFSSettings
from ..tiers.local_nvme import LocalNVMeSettings
from ..tiers.metadata_engine import MetadataSettings
from ..tiers.node_cache import platform_cache_problems
from ..tiers.node_storage import NodeStorageSettings
from ..tiers.object_store import ObjectStoreSettings
from ..tiers.rook_ceph import RookCephSettings
from ..tiers.storage_tiers import TIERS, TiersSettings
from ..training.fluid import FluidSettings, runtime_claim_problems
from ..training.node_pools import NodePool, untolerated_pools
from ..training.trainer import TrainingSettings
from ..training.volcano import VolcanoSettings
from .profiles import load_profile
from .sources import SourcesSettings

PROJECT = "ai-storage-platform"


class ClusterSettings(Section):
    """The target cluster and how stateful resources are guarded."""

    kubernetes_version: str = Field("1.33", pattern=r"^1\.(2[5-9]|3[0-7])$")
    """Kubernetes minor version of the cluster (1.30 to 1.37); rendered objects are validated against it."""
    kubeconfig: str | None = None
    """Path to the kubeconfig for `pulumi up`; unset uses the ambient KUBECONFIG."""
    context: str | None = None
    """kubeconfig context to deploy to; unset uses the current context."""
    protect_stateful_resources: bool = False
    """Set `protect` and `retainOnDelete` on buckets, data volumes and clusters (on for staging and prod)."""
    acknowledge_replacements: list[ResourceRef] = []
    """Protected or data-holding resources an update may replace or delete, as the diff names them (review.md)."""
    node_pools: dict[DnsLabel, NodePool] = {}
    """Groups of nodes team jobs may ask for by name (`job.nodePool`): each pool's labels and the tolerations of its
    taints (stack output `nodePools`)."""

    def problems(self) -> list[Problem]:
        """Kubernetes 1.30 or later: team namespaces rely on a ValidatingAdmissionPolicy (GA in 1.30)."""
        hint = (
            "the platform refuses claims outside the storage tiers in team namespaces with a "
            "ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA in 1.30); upgrade the cluster"
        )
        too_old = int(self.kubernetes_version.split(".")[1]) < 30
        return (
            [Problem("kubernetesVersion", "expected 1.30 or later", self.kubernetes_version, hint)] if too_old else []
        )


class CheckpointSettings(CheckpointProtection):
    """Protection of the platform's checkpoint claim, and how long offsite copies stay in the bucket."""

    offsite_retention_days: int = Field(30, ge=1, le=3650)
    """Days an offsite checkpoint copy is kept; the bucket expires older ones under `checkpoints/`."""


class PlatformSettings(Section):
    """Every setting of a stack, by section."""

    profile: str = "dev"
    """Environment profile the stack starts from: one in `stacks/` (default: the stack name), or the path of a profile
    file of your own (`*.yaml`, from the project directory; `extends: prod` starts it from a shipped one)."""
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
    efs: EfsSettings = EfsSettings()
    """Amazon EFS: an existing file system, an access point per claim (EKS)."""
    fsx_lustre: FsxLustreSettings = FsxLustreSettings()
    """Amazon FSx for Lustre: a file system per claim (EKS)."""
    acceptance: AcceptanceSettings = AcceptanceSettings()
    """fio acceptance Jobs per tier, with thresholds."""
    volcano: VolcanoSettings = VolcanoSettings()
    """Volcano scheduler and team Queues."""
    training: TrainingSettings = TrainingSettings()
    """Kubeflow training operator and its Volcano-scheduled runtimes."""
    fluid: FluidSettings = FluidSettings()
    """Fluid dataset caching."""
    checkpoints: CheckpointSettings = CheckpointSettings()
    """Snapshots and offsite copies of the platform's checkpoint claim."""
    teams: TeamsSettings = TeamsSettings()
    """The team namespaces the platform vends, and their defaults."""
    monitoring: MonitoringSettings = MonitoringSettings()
    """Prometheus Operator scrape objects, alert rules and Grafana dashboards."""
    network_policies: NetworkPolicySettings = NetworkPolicySettings()
    """Who may connect to the metadata engine and MinIO."""
    node_storage: NodeStorageSettings = NodeStorageSettings()
    """Tolerations of the storage drivers' node plugins (to reach tainted GPU nodes)."""
    sources: SourcesSettings = SourcesSettings()
    """Mirrors of the upstream chart repositories and kustomize directories (air-gapped clusters)."""
    capacity: CapacitySettings = CapacitySettings()
    """What the cluster's disks hold: every tier's promises must fit (docs/tiers.md, "Capacity")."""

    def tier_placement(self, tier: str) -> dict[str, Any]:
        """Where a pod that measures ``tier`` can run, from the settings that place the tier's own node pods: the
        hot tier (TopoLVM) and a cold tier cached on the node cache volume live only on `localNvme.nodeSelector`'s
        nodes; every tier's node plugin tolerates `nodeStorage.tolerations`, so the pod does too."""
        backend = getattr(self.tiers, tier)
        on_nvme_nodes = backend != registry.NONE and registry.get(backend).node_local(self)
        placement: dict[str, Any] = {"nodeSelector": dict(self.local_nvme.node_selector)} if on_nvme_nodes else {}
        if self.node_storage.tolerations:
            placement["tolerations"] = self.node_storage.specs()
        return placement

    def problems(self) -> list[Problem]:
        """Rules that span sections (each section's own rules are its ``problems()``)."""
        return [
            *self._tier_problems(),
            *self._storage_problems(),
            *self._scheduling_problems(),
            *self._namespace_problems(),
            *team_problems(
                self.teams,
                [q.name for q in self.volcano.queues],
                self.juicefs.enabled and self.tiers.cold != "none",
                self.fluid.enabled_datasets() if self.fluid.enabled else None,
            ),
        ]

    def _tier_problems(self) -> list[Problem]:
        enabled = registry.enabled(self)
        on = ", ".join(b for b, is_on in enabled.items() if is_on) or "none"
        return [
            Problem(
                f"tiers.{tier}",
                f"expected a backend this stack enables ({on})",
                backend,
                f"enable the {backend} component or map the tier to another backend (or 'none')",
            )
            for tier in TIERS
            if (backend := getattr(self.tiers, tier)) != registry.NONE and not enabled[backend]
        ]

    def _storage_problems(self) -> list[Problem]:
        """Ceph off TopoLVM's disks, RGW needing Rook-Ceph, ElastiCache needing AWS, a metadata engine that
        survives a node loss in a protected stack, the caches on the node cache volume, checkpoint-tier arithmetic."""
        found = []
        m = self.metadata
        if self.juicefs.enabled and self.cluster.protect_stateful_resources and not m.accept_node_loss_risk:
            found += [replace(p, key=f"metadata.{p.key}") for p in m.node_loss_risks()]
        if self.juicefs.enabled and m.engine == "elasticache" and self.object_store.backend != "s3":
            found.append(
                Problem(
                    "metadata.engine",
                    "expected standalone or sentinel unless objectStore.backend is s3",
                    "elasticache",
                    "ElastiCache is the managed engine of stacks on AWS; in-cluster stacks run Redis with Sentinel",
                )
            )
        ceph = self.rook_ceph
        shared = ceph.shared_devices_problem() if self.cluster.protect_stateful_resources else None
        if shared and self.tiers.checkpoint == "cephfs":
            found.append(shared)
        key, pattern, devices = ceph.storage.filter_in_effect()
        on_nvme = pattern and any(re.search(pattern, d) for d in devices)
        apart = ceph.storage.osd_node_selector and ceph.storage.osd_node_selector != self.local_nvme.node_selector
        if ceph.enabled and self.local_nvme.enabled and on_nvme and not ceph.storage.nodes and not apart:
            found.append(
                Problem(
                    f"rookCeph.storage.{key}",
                    "expected a filter that matches no NVMe device while localNvme is enabled",
                    pattern,
                    "Ceph would claim the NVMe disks meant for TopoLVM; list the disks in rookCeph.storage.nodes, "
                    "or keep the OSDs on storage nodes of their own (rookCeph.storage.osdNodeSelector)",
                )
            )
        datasets = self.fluid.enabled_datasets()
        if self.object_store.s3.oidc_provider_arn and self.object_store.backend == "s3" and datasets:
            found.append(
                Problem(
                    "fluid.datasets",
                    "expected no Fluid datasets with objectStore.s3.oidcProviderArn",
                    len(datasets),
                    "Fluid 1.0.8 runtimes name no ServiceAccount, so their pods would reach the bucket with no role",
                )
            )
        if self.object_store.backend == "ceph-rgw" and not ceph.enabled:
            hint = "enable rookCeph (it runs the RGW object store) or pick another backend"
            found.append(
                Problem("objectStore.backend", "expected minio or s3 when rookCeph is disabled", "ceph-rgw", hint)
            )
        pools = untolerated_pools(self.cluster.node_pools, self.node_storage.tolerations)
        sizing = checkpoint_sizing_problems(self) + mds_sizing_problems(self) + capacity_problems(self)
        return found + platform_cache_problems(self) + sizing + pools

    def _scheduling_problems(self) -> list[Problem]:
        """Training needs Volcano, a checkpoint tier and known queues; JuiceFS datasets need JuiceFS."""
        found = []
        t = self.training
        if t.enabled and not self.volcano.enabled:
            found.append(
                Problem("training.enabled", "expected volcano.enabled: true", True, "runtimes gang-schedule on Volcano")
            )
        if t.enabled and self.tiers.checkpoint == "none":
            found.append(
                Problem("tiers.checkpoint", "expected a backend", "none", "training's checkpoint claim uses this tier")
            )
        landing = [i for i, r in enumerate(t.runtimes if t.enabled else []) if r.checkpoint_landing.enabled]
        if landing and self.tiers.hot == "none":
            key, expected = f"training.runtimes[{landing[0]}].checkpointLanding.enabled", "expected a hot tier"
            found.append(Problem(key, expected, True, "the landing volume is on the hot tier: set tiers.hot"))
        snapshots = self.rook_ceph.enabled and self.rook_ceph.snapshot_classes
        if t.enabled and self.checkpoints.snapshots.enabled and not (self.tiers.checkpoint == "cephfs" and snapshots):
            found.append(
                Problem(
                    "checkpoints.snapshots.enabled",
                    "expected the checkpoint tier on cephfs with rookCeph.snapshotClasses: true",
                    True,
                    "only the Ceph CSI drivers get a VolumeSnapshotClass here; turn the snapshots off otherwise",
                )
            )
        queues = [q.name for q in self.volcano.queues]
        found += [
            Problem(
                f"training.runtimes[{i}].queue",
                f"expected one of volcano.queues ({', '.join(queues) or 'none'})",
                runtime.queue,
                "add the queue to volcano.queues or pick an existing one",
            )
            for i, runtime in enumerate(t.runtimes if t.enabled else [])
            if runtime.queue not in queues
        ]
        for i, runtime in enumerate(t.runtimes if t.enabled and self.tiers.hot == "none" else []):
            if runtime.staging.enabled:
                key, hint = f"training.runtimes[{i}].staging.enabled", "it stages onto a volume of the hot tier's class"
                found.append(Problem(key, "expected a backend for tiers.hot", True, hint))
        found += [
            Problem(
                f"fluid.datasets[{i}].runtime",
                "expected a runtime with a backend (JuiceFSRuntime needs juicefs.enabled: true)",
                d.runtime,
                "enable juicefs or use runtime 'alluxio' over the object store",
            )
            for i, d in enumerate(self.fluid.enabled_datasets())
            if d.runtime == "juicefs" and not self.juicefs.enabled
        ]
        return found + runtime_claim_problems(self.training, self.fluid.enabled_datasets())

    def _namespace_problems(self) -> list[Problem]:
        found = []
        seen: dict[str, str] = {}
        for key, ns in self.namespaces().items():
            if ns in seen:
                found.append(
                    Problem(f"{key}.namespace", f"expected a namespace not used by {seen[ns]}", ns, "pick another")
                )
            seen[ns] = key
        return found + team_namespace_problems(self)

    def scheduling_namespaces(self) -> dict[str, str]:
        """The namespaces the volcano, training and fluid components create, by settings key."""
        owned = {}
        if self.volcano.enabled:
            owned["volcano"] = self.volcano.namespace
        datasets = {d.namespace for d in self.fluid.enabled_datasets()}
        if self.fluid.enabled:
            owned["fluid"] = self.fluid.namespace
            owned.update({f"fluid.datasets.{ns}": ns for ns in sorted(datasets)})
        if self.training.enabled:
            owned.update(self.training.operator_namespaces())
            if self.training.workload_namespace not in datasets:
                owned["training.workloadNamespace"] = self.training.workload_namespace
        return owned

    def namespaces(self) -> dict[str, str]:
        """The namespace each enabled component creates, by settings key."""
        owned = {"objectStore": self.object_store.namespace}
        if self.acceptance.enabled:
            owned["acceptance"] = self.acceptance.namespace
        if self.juicefs.enabled:
            if self.metadata.engine != "elasticache":
                owned["metadata"] = self.metadata.namespace
            owned["juicefs"] = self.juicefs.namespace
        if self.rook_ceph.enabled:
            owned["rookCeph"] = self.rook_ceph.namespace
        if self.monitoring.enabled:
            owned["monitoring"] = self.monitoring.namespace
        if self.local_nvme.enabled:
            owned["localNvme"] = self.local_nvme.namespace
            if self.local_nvme.pod_mutating_webhook:
                owned["localNvme.certManager"] = self.local_nvme.cert_manager_namespace
        teams = {f"teams.workspaces[{i}]": t.namespace_name for i, t in enumerate(self.teams.workspaces)}
        return {**owned, **self.scheduling_namespaces(), **teams}


def load_settings(stack: str, config: Mapping[str, Any]) -> PlatformSettings:
    """Merge code defaults, the stack's profile and its config; raise SettingsError on any bad value."""
    profile = config.get("profile", stack)
    if not isinstance(profile, str):
        raise SettingsError([Problem("profile", "expected a profile name", profile, "e.g. dev, staging or prod")])
    data = merge(load_profile(profile), config)
    return validate(PlatformSettings, {**data, "profile": profile})


def decode(value: Any) -> Any:
    """A config value as Pulumi passes it (objects as JSON text, scalars as text) back to data."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        return json.loads(value)
    return value


def stack_config(project: str | None = None) -> dict[str, Any]:
    """Every key the stack sets in the project's namespace, decoded (the platform's S3 region from `aws:region`)."""
    from pulumi.runtime import config as runtime_config

    project = project or pulumi.get_project()
    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    prefix = f"{project}:"
    config = {k[len(prefix) :]: decode(v) for k, v in sorted(raw.items()) if k.startswith(prefix)}
    return with_provider_region(config, raw.get("aws:region")) if project == PROJECT else config
