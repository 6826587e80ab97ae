"""Checkpoint protection: scheduled CSI snapshots of a checkpoint claim (``checkpoint_snapshots``), and offsite
copies of complete checkpoints in the object store (``checkpoint_offsite``).

A training job writes a checkpoint as ``step-NNNNNNNN/`` and marks it complete with a ``COMPLETE`` file last:
the layout of the training library's CheckpointManager (``ai_storage_training.layout``, its one definition).
Snapshots are crash-consistent copies of the whole claim, kept ``keep`` at a time; a restore from one uses only the
checkpoints that carry the marker. The offsite copy uploads only complete checkpoints, with ``juicefs sync``,
each checkpoint's marker last, so a copy in the bucket is complete exactly when its marker is there.
"""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from ai_storage_training import layout

from .checkpoint_offsite import (
    OFFSITE_PREFIX,
    OFFSITE_SUFFIX,
    DeliveredOffsite,
    OffsiteSettings,
    OffsiteTarget,
    copy_offsite,
    offsite_account,
    offsite_cronjob_spec,
    offsite_script,
)
from .checkpoint_snapshots import (
    SNAPSHOT_LABEL,
    SNAPSHOTS_SUFFIX,
    SnapshotSettings,
    schedule_snapshots,
    snapshot_cronjob_spec,
    snapshot_rules,
)
from .common import kube
from .sections import Section

__all__ = [
    "MARKER",
    "OFFSITE_PREFIX",
    "OFFSITE_SUFFIX",
    "SNAPSHOTS_SUFFIX",
    "SNAPSHOT_LABEL",
    "CheckpointProtection",
    "DeliveredOffsite",
    "OffsiteSettings",
    "OffsiteTarget",
    "SnapshotSettings",
    "checkpoint_claim",
    "offsite_account",
    "offsite_cronjob_spec",
    "offsite_script",
    "protect_checkpoints",
    "snapshot_cronjob_spec",
    "snapshot_rules",
]

MARKER = layout.MARKER
"""The file a checkpoint writer creates last, inside ``step-*/``."""


class CheckpointProtection(Section):
    """Snapshots and offsite copies of a checkpoint claim."""

    snapshots: SnapshotSettings = SnapshotSettings()
    """Scheduled CSI snapshots of the claim."""
    offsite: OffsiteSettings = OffsiteSettings()
    """Scheduled copies of complete checkpoints to the object store."""


def protect_checkpoints(
    name: str,
    claim: str,
    namespace: str,
    s: CheckpointProtection,
    target: OffsiteTarget | DeliveredOffsite | None,
    parent: pulumi.Resource,
    after: list[pulumi.Resource],
) -> None:
    """The snapshot schedule (with a service account allowed exactly that) and the offsite copy of ``claim`` in
    ``namespace``, as ``s`` enables them: with the keys of an ``OffsiteTarget`` (in a Secret of its own), or with
    what the platform delivered (``DeliveredOffsite``); ``after`` holds the claim and its namespace."""
    if s.snapshots.enabled:
        schedule_snapshots(name, claim, namespace, s.snapshots, parent, after)
    if s.offsite.enabled and target is not None:
        copy_offsite(name, claim, namespace, s.offsite, target, parent, after)


def checkpoint_claim(
    resource_name: str,
    name: str,
    namespace: pulumi.Input[str],
    storage_class: pulumi.Input[str],
    size: str,
    opts: pulumi.ResourceOptions,
) -> k8s.core.v1.PersistentVolumeClaim:
    """A ReadWriteMany claim on the checkpoint tier, for sharded saves from every training node."""
    return k8s.core.v1.PersistentVolumeClaim(
        resource_name,
        metadata={"name": name, "namespace": namespace, "labels": kube.labels("training", "checkpoints")},
        spec={
            "accessModes": ["ReadWriteMany"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
        opts=opts,
    )
