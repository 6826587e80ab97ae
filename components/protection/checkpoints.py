"""Checkpoint protection: scheduled CSI snapshots of a checkpoint claim (``checkpoint_snapshots``), and offsite
copies of complete checkpoints in the object store (``checkpoint_offsite``).

A job may also land its checkpoints on a node-local volume of the hot tier (``landing``): the training library
writes there first and promotes each complete checkpoint to the checkpoint claim in the background.

A training job writes a checkpoint as ``step-NNNNNNNN/`` (at the claim's root or in a directory of its run,
``<run>/step-NNNNNNNN/``) and marks it complete with a ``COMPLETE`` file last:
the layout of the training library's CheckpointManager (``ai_storage_training.checkpoint.layout``, its one definition).
Snapshots are crash-consistent copies of the whole claim, kept ``keep`` at a time; a restore from one uses only the
checkpoints that carry the marker. The offsite copy uploads only complete checkpoints, with ``juicefs sync``,
each checkpoint's marker last, so a copy in the bucket is complete exactly when its marker is there.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ai_storage_training.checkpoint import layout

from ..common import kube
from ..common.sections import Quantity, Section
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

__all__ = [
    "MARKER",
    "OFFSITE_PREFIX",
    "OFFSITE_SUFFIX",
    "SNAPSHOTS_SUFFIX",
    "SNAPSHOT_LABEL",
    "CheckpointProtection",
    "DeliveredOffsite",
    "LandingSettings",
    "OffsiteSettings",
    "OffsiteTarget",
    "SnapshotSettings",
    "checkpoint_claim",
    "landing",
    "offsite_account",
    "offsite_cronjob_spec",
    "offsite_script",
    "protect_checkpoints",
    "snapshot_cronjob_spec",
    "snapshot_rules",
]

MARKER = layout.MARKER
"""The file a checkpoint writer creates last, inside ``step-*/``."""
DIR_VARIABLE = "AI_STORAGE_CHECKPOINT_DIR"
"""Where the training library keeps the job's durable checkpoints (on the checkpoint claim)."""
LOCAL_DIR_VARIABLE = "AI_STORAGE_CHECKPOINT_LOCAL_DIR"
"""Where the training library lands checkpoints before promoting them to ``DIR_VARIABLE``."""
CHECKPOINT_VOLUME = "checkpoints"
CHECKPOINT_PATH = "/checkpoints"
"""Where a training pod mounts the checkpoint claim (the restore test reads it there too)."""
LANDING_VOLUME = "checkpoint-landing"
LANDING_PATH = "/checkpoint-landing"


class LandingSettings(Section):
    """A node-local volume of the hot tier that checkpoints land on before they are promoted to the claim."""

    enabled: bool = False
    """Give each training pod a generic ephemeral volume of the `<prefix>hot` class at `/checkpoint-landing` and
    name both directories to the training library (`AI_STORAGE_CHECKPOINT_LOCAL_DIR`, `AI_STORAGE_CHECKPOINT_DIR`)."""
    size: Quantity = "100Gi"
    """Requested size of each pod's landing volume (counts against the namespace's hot-tier quota); room for at
    least two checkpoints of one pod."""


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


def landing(s: LandingSettings, storage_class: pulumi.Input[str], durable_dir: str) -> dict[str, list[dict[str, Any]]]:
    """What a training pod gets for ``s``: its container's ``volumeMounts`` and ``env``, the pod's ``volumes``
    (empty lists when it is off). The volume lives as long as the pod, on the node the pod runs on."""
    if not s.enabled:
        return {"volumeMounts": [], "env": [], "volumes": []}
    volume = kube.ephemeral_volume(LANDING_VOLUME, storage_class, s.size, kube.labels("training", LANDING_VOLUME))
    return {
        "volumeMounts": [{"name": LANDING_VOLUME, "mountPath": LANDING_PATH}],
        "env": [{"name": DIR_VARIABLE, "value": durable_dir}, {"name": LOCAL_DIR_VARIABLE, "value": LANDING_PATH}],
        "volumes": [volume],
    }


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
