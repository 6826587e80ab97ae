"""Platform: the whole storage platform for one stack, each component switchable per stack."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from .observability.monitoring import Monitoring, MonitoringArgs
from .protection.checkpoints import OFFSITE_PREFIX, OffsiteTarget, offsite_account
from .protection.metadata_backup import BACKUP_PREFIX
from .settings import PlatformSettings
from .teams.network_policies import NetworkPolicies, NetworkPoliciesArgs
from .teams.quotas import claim_class_policy
from .teams.team_spaces import space_quota_job, space_quotas
from .teams.tenants import Teams, TeamsArgs
from .tiers import registry
from .tiers.acceptance import StorageAcceptance, StorageAcceptanceArgs
from .tiers.backend import BuildContext, TierBackend
from .tiers.juicefs import CLIENT_ENV_SECRET, SECRET_NAME, JuiceFS
from .tiers.metadata_engine import MetadataEngine
from .tiers.object_store import ObjectStore, ObjectStoreArgs
from .tiers.rook_ceph import RookCeph
from .tiers.storage_tiers import TIERS, StorageTiers, StorageTiersArgs, class_name
from .training.fluid import BucketSource, Fluid, FluidArgs
from .training.fluid_dataset import DatasetSettings, bucket_prefix
from .training.trainer import Training, TrainingArgs
from .training.volcano import Volcano, VolcanoArgs


def expirations(s: PlatformSettings) -> dict[str, int]:
    """The object-store expiries that enforce the retention of the metadata backups and the offsite checkpoints."""
    backup = s.juicefs.metadata_backup
    found = {BACKUP_PREFIX: backup.retention_days} if s.juicefs.enabled and backup.enabled else {}
    if s.checkpoints.offsite.enabled or any(t.offsite for t in s.teams.workspaces):  # teams copy there too
        found[OFFSITE_PREFIX] = s.checkpoints.offsite_retention_days
    return found


@dataclass
class PlatformArgs:
    """Inputs of the Platform."""

    settings: PlatformSettings
    previous_outputs: pulumi.Input[Mapping[str, Any]] | None = None
    """The outputs of the stack's last update (a StackReference to the stack itself): a protected stack refuses
    to change the metadata engine it deployed unless told the metadata was moved."""


class Platform(pulumi.ComponentResource):
    """Object store, metadata engine, JuiceFS and the tier StorageClasses, as the stack's settings say."""

    storage_classes: dict[str, pulumi.Output[str]]
    """StorageClass name per tier."""
    acceptance: StorageAcceptance | None
    """The fio acceptance Jobs (its ``verdicts`` per tier), or None when off."""
    object_store: ObjectStore
    """The object store component."""
    metadata: MetadataEngine | None
    """The JuiceFS metadata engine (with JuiceFS only)."""
    rook_ceph: RookCeph | None
    """The Rook-Ceph cluster (when enabled)."""
    volcano: Volcano | None
    """The Volcano scheduler (when enabled)."""
    fluid: Fluid | None
    """Fluid dataset caching (when enabled)."""
    teams: Teams | None
    """The team namespaces the platform vends (when `teams.workspaces` lists any)."""

    def __init__(self, name: str, args: PlatformArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:platform:Platform", name, None, opts)
        s = args.settings
        s.sources.use()
        labels = s.monitoring.selector_labels if s.monitoring.enabled else None
        built = BuildContext(name, s, self, labels, previous_outputs=args.previous_outputs)
        self._build_backends(built, after_object_store=False)
        self.rook_ceph = built.shared.get("rook_ceph")
        gateway = self.rook_ceph.rgw if self.rook_ceph else None
        protect = s.cluster.protect_stateful_resources
        store_args = ObjectStoreArgs(s.object_store, protect, expirations(s), gateway, s.monitoring.enabled)
        self.object_store = ObjectStore(f"{name}-object-store", store_args, pulumi.ResourceOptions(parent=self))
        built.object_store = self.object_store
        self._build_backends(built, after_object_store=True)
        self.metadata, self._volume = built.shared.get("metadata"), built.shared.get("juicefs_source")
        juicefs: JuiceFS | None = built.shared.get("juicefs")
        tiers = self._tiers(name, s, built.built)
        self._scheduling(name, s, tiers)
        self.teams = self._teams(name, s, juicefs)
        if s.monitoring.enabled:
            self._monitoring(name, s)
        self._walls(name, s)
        # Last: the ceph-rgw bucket policy needs every scoped access asked for above.
        self.object_store.finish()
        self.register_outputs({"storage_classes": self.storage_classes})

    def _build_backends(self, ctx: BuildContext, after_object_store: bool) -> None:
        """The tier backends the stack enables (``tiers/registry.py``), those built before the object store (Ceph
        RGW runs on Rook-Ceph) or after it (JuiceFS keeps its data there), into ``ctx.built``."""
        for backend in registry.REGISTERED:
            if backend.after_object_store == after_object_store and backend.is_on(ctx.settings):
                ctx.built[backend.name] = backend.build(ctx)

    def _tiers(self, name: str, s: PlatformSettings, backends: Mapping[str, TierBackend]) -> StorageTiers:
        """The tier StorageClasses on the enabled backends, and the fio acceptance Jobs that measure them."""
        child = pulumi.ResourceOptions(parent=self)
        tiers = StorageTiers(f"{name}-tiers", StorageTiersArgs(s.tiers, backends), child)
        self.storage_classes = tiers.classes
        self.acceptance = None
        if s.acceptance.enabled:
            placement = {tier: s.tier_placement(tier) for tier in tiers.classes}
            args = StorageAcceptanceArgs(s.acceptance, tiers.classes, placement)
            self.acceptance = StorageAcceptance(f"{name}-acceptance", args, child)
        return tiers

    def _teams(self, name: str, s: PlatformSettings, juicefs: JuiceFS | None) -> Teams | None:
        """The team namespaces the platform vends (when `teams.workspaces` lists any)."""
        if not s.teams.workspaces:
            return None
        teams = TeamsArgs(
            s.teams,
            s.tiers.name_prefix,
            self.object_store,
            juicefs,
            self.volcano.release if self.volcano else None,
            self.fluid,
            s.fluid.enabled_datasets(),
            s.cluster.protect_stateful_resources,
        )
        quotas = space_quotas({t.name: t.space for t in s.teams.workspaces})
        if juicefs is not None and quotas:
            secrets = (SECRET_NAME, CLIENT_ENV_SECRET)
            space_quota_job(f"{name}-team-space-quotas", s.juicefs.namespace, quotas, secrets, juicefs.ready, self)
        return Teams(f"{name}-teams", teams, pulumi.ResourceOptions(parent=self))

    def _dataset_bucket(self, d: DatasetSettings) -> BucketSource:
        """The bucket as an Alluxio dataset reaches it: keys of the dataset's directory only (Fluid's runtimes
        name no ServiceAccount: their pods run as the namespace's default)."""
        store = self.object_store
        access = store.scoped_access(f"fluid-{d.namespace}-{d.name}", bucket_prefix(d.path), (d.namespace, "default"))
        return BucketSource(store.endpoint, store.bucket, access.access_key, access.secret_key)

    def _monitoring(self, name: str, s: PlatformSettings) -> None:
        """Scrape objects for the parts this stack runs, its alert rules and dashboards."""
        in_cluster = s.juicefs.enabled and s.metadata.engine != "elasticache"
        sentinel = s.juicefs.enabled and s.metadata.engine == "sentinel"
        parts: list[pulumi.Resource] = [self.object_store]
        parts += [c for c in (self.metadata, self.volcano, self.fluid) if c is not None]
        args = MonitoringArgs(
            s.monitoring,
            juicefs_namespace=s.juicefs.namespace if s.juicefs.enabled else None,
            metadata_namespace=s.metadata.namespace if in_cluster else None,
            sentinel_replicas=s.metadata.sentinel.replicas if sentinel else None,
            checkpoint_interval=s.tiers.decisions.checkpoint.checkpoint_interval,
            minio_namespace=s.object_store.namespace if s.object_store.backend == "minio" else None,
            volcano_namespace=s.volcano.namespace if s.volcano.enabled else None,
            fluid_namespace=s.fluid.namespace if s.fluid.enabled else None,
            dataset_namespaces=[d.namespace for d in s.fluid.enabled_datasets()],
            ceph=s.rook_ceph.enabled,
            acceptance_namespace=s.acceptance.namespace if s.acceptance.enabled else None,
            after=parts,
        )
        Monitoring(f"{name}-monitoring", args, pulumi.ResourceOptions(parent=self))

    def _walls(self, name: str, s: PlatformSettings) -> None:
        """What keeps team namespaces off the platform: claims only on the tier classes, and NetworkPolicies
        around the metadata engine and MinIO."""
        child = pulumi.ResourceOptions(parent=self)
        classes = [class_name(s.tiers, tier) for tier in TIERS if getattr(s.tiers, tier) != "none"]
        claim_class_policy(name, classes, s.fluid.namespace if s.fluid.enabled else None, self)
        if not s.network_policies.enabled:
            return
        datasets = s.fluid.enabled_datasets()
        juicefs = [s.juicefs.namespace] if s.juicefs.enabled else []
        juicefs += [d.namespace for d in datasets if d.runtime == "juicefs"]
        bucket = [d.namespace for d in datasets]
        if s.training.enabled and s.volcano.enabled and s.checkpoints.offsite.enabled:
            bucket.append(s.training.workload_namespace)  # the platform's offsite copy runs there
        in_cluster = s.juicefs.enabled and s.metadata.engine != "elasticache"
        args = NetworkPoliciesArgs(
            s.network_policies,
            metadata_namespace=s.metadata.namespace if in_cluster else None,
            minio_namespace=s.object_store.namespace if s.object_store.backend == "minio" else None,
            juicefs_clients=juicefs,
            bucket_clients=bucket,
            monitoring=s.monitoring.enabled,
            after=[c for c in (self.object_store, self.metadata) if c is not None],
        )
        NetworkPolicies(f"{name}-network-policies", args, child)

    def _scheduling(self, name: str, s: PlatformSettings, tiers: StorageTiers) -> None:
        """Volcano, then Fluid, then the training operator (its runtimes mount Fluid's dataset claims)."""
        child = pulumi.ResourceOptions(parent=self)
        self.volcano = Volcano(f"{name}-volcano", VolcanoArgs(s.volcano), child) if s.volcano.enabled else None
        self.fluid = None
        if s.fluid.enabled:
            fluid = FluidArgs(s.fluid, self._dataset_bucket, self._volume, s.node_storage.specs())
            self.fluid = Fluid(f"{name}-fluid", fluid, child)
        if s.training.enabled and self.volcano is not None:
            t = s.training
            shared = self.fluid.namespaces.get(t.workload_namespace) if self.fluid else None
            required = [
                d.name
                for d in s.fluid.enabled_datasets()
                if s.fluid.data_affinity == "required" and d.namespace == t.workload_namespace
            ]
            store = self.object_store
            offsite = None
            if s.checkpoints.offsite.enabled:
                ns = t.workload_namespace
                access = store.scoped_access(
                    f"offsite-{ns}", f"{OFFSITE_PREFIX}{ns}/", (ns, offsite_account(t.checkpoint_claim))
                )
                offsite = OffsiteTarget(
                    store.storage_type, store.bucket_url, access.access_key, access.secret_key, access.role_arn
                )
            args = TrainingArgs(
                t,
                self.volcano.release,
                tiers.classes["checkpoint"],
                shared,
                required,
                s.cluster.protect_stateful_resources,
                s.checkpoints,
                offsite,
                s.tiers.name_prefix,
            )
            Training(f"{name}-training", args, child)
