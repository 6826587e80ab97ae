"""StorageTiers: the StorageClasses a training job asks for by tier, never by backend.

Each backend component (``registry`` lists them: Rook CephFS and RBD, TopoLVM, JuiceFS, EFS, FSx for Lustre)
describes what it contributes to a tier as a ``TierClass``; this component turns the stack's tier-to-backend map
into StorageClasses named after the tiers, each annotated with what its tier was sized for (``decision_records``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import pulumi
import pulumi_kubernetes as k8s
from pydantic import Field

from ..common.sections import DnsLabel, Problem, Section
from . import registry
from .backend import TIERS, Tier, TierBackend
from .decision_records import DeviceSpeed, TierDecisions, record_annotations
from .registry import Backend

NAME_PREFIX = r"^([a-z0-9][-a-z0-9]{0,30}-)?$"
"""A StorageClass name prefix ending in '-', or empty."""
RECLAIM: dict[str, str] = {"hot": "Delete", "warm": "Delete", "cold": "Retain", "checkpoint": "Retain"}
"""Reclaim policy per tier: the durable tiers (cold, checkpoint) keep their data when a claim goes; the block
tier's comes from settings."""


class TiersSettings(Section):
    """Which backend serves each tier, and how the StorageClasses are named."""

    name_prefix: str = Field("", pattern=NAME_PREFIX)
    """Prefix of every tier StorageClass name, ending in '-' (e.g. `ai-` gives `ai-hot`); empty for none."""
    hot: Backend = "topolvm"
    """Backend of the hot tier (node-local NVMe working set)."""
    warm: Backend = "cephfs"
    """Backend of the warm tier (shared POSIX datasets, RWX)."""
    cold: Backend = "juicefs"
    """Backend of the cold tier (object-backed POSIX with a local cache)."""
    checkpoint: Backend = "cephfs"
    """Backend of the checkpoint tier (burst writes, kept apart from training reads)."""
    block: Backend = "rbd"
    """Backend of the block tier (RWO block volumes for databases and single-writer jobs)."""
    block_reclaim_policy: Literal["Delete", "Retain"] = "Delete"
    """What happens to a block volume when its claim is deleted."""
    default_tier: Tier | None = None
    """Tier marked as the cluster's default StorageClass; unset leaves the cluster default alone."""
    decisions: TierDecisions = TierDecisions()
    """What each tier was sized for (the design's decision record), annotated on its StorageClass (docs/tiers.md)."""
    device_speeds: dict[DnsLabel, DeviceSpeed] = {}
    """MB/s of one device of each Ceph device class the records name, over the code's (`hdd`, `ssd`, `nvme`;
    docs/config.md)."""

    def problems(self) -> list[Problem]:
        """Each tier's backend may serve it; the default tier has a backend."""
        found = [
            Problem(
                tier,
                f"expected a backend that serves the {tier} tier ({', '.join(registry.serving(tier))}, or 'none')",
                backend,
                f"{backend} serves {', '.join(registry.get(backend).serves)} (docs/tiers.md, 'Backends')",
            )
            for tier in TIERS
            if (backend := getattr(self, tier)) != "none" and tier not in registry.get(backend).serves
        ]
        if self.default_tier and getattr(self, self.default_tier) == "none":
            found.append(
                Problem("defaultTier", "expected a tier that has a backend", self.default_tier, "map it first")
            )
        return found


@dataclass
class StorageTiersArgs:
    """Inputs of StorageTiers."""

    settings: TiersSettings
    backends: Mapping[str, TierBackend]
    """The enabled backend components by backend name (``registry``: `juicefs`, `cephfs`, `topolvm`, ...)."""


def class_name(settings: TiersSettings, tier: Tier) -> str:
    """The StorageClass name of ``tier``."""
    return f"{settings.name_prefix}{tier}"


class StorageTiers(pulumi.ComponentResource):
    """One StorageClass per tier the stack maps to a backend."""

    classes: dict[str, pulumi.Output[str]]
    """StorageClass name per tier."""

    def __init__(self, name: str, args: StorageTiersArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ai-storage:storage_tiers:StorageTiers", name, None, opts)
        s = args.settings
        self.classes = {}
        for tier in TIERS:
            backend = getattr(s, tier)
            if backend == "none":
                continue
            spec = args.backends[backend].tier_class(tier)
            annotations = {
                "ai-storage-platform/tier": tier,
                "ai-storage-platform/backend": backend,
                "ai-storage-platform/access-mode": spec.access_mode,
            }
            if s.default_tier == tier:
                annotations["storageclass.kubernetes.io/is-default-class"] = "true"
            if spec.snapshot_class:
                annotations["ai-storage-platform/snapshot-class"] = spec.snapshot_class
            if spec.devices:
                annotations["ai-storage-platform/devices"] = spec.devices
            annotations.update(record_annotations(getattr(s.decisions, tier)))
            sc = k8s.storage.v1.StorageClass(
                f"{name}-{tier}",
                metadata={"name": class_name(s, tier), "annotations": annotations},
                provisioner=spec.provisioner,
                parameters=dict(spec.parameters),
                reclaim_policy=s.block_reclaim_policy if tier == "block" else RECLAIM[tier],
                volume_binding_mode=spec.binding_mode,
                allow_volume_expansion=spec.allow_expansion,
                mount_options=list(spec.mount_options) or None,
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(spec.depends_on)),
            )
            self.classes[tier] = sc.metadata.name
        self.register_outputs({"classes": self.classes})
