"""What a diff means for data, for the reviewer: per resource (protection, lost claims and volumes, Secrets read
while they are replaced, StorageClass fields that reach only new volumes, names that resolve to nothing for a
while) and per stack (chart upgrades, a change of metadata engine)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..tiers.metadata_engine import previous_engine
from .diff_model import Change, Render
from .diff_rules import NEW_VOLUMES_ONLY, NEXT_MOUNT_ONLY, RELEASE, changed_leaves, field_text, value_text

RUNBOOK_ENGINE = "docs/runbook.md#move-the-metadata-to-another-engine"
RUNBOOK_CHART = "docs/runbook.md#upgrade-a-chart"
RUNBOOK_VOLUME = "docs/runbook.md#rename-the-juicefs-volume"
ELASTICACHE_GROUP = "aws:elasticache/replicationGroup:ReplicationGroup"

CHART_NOTES = {
    "juicefs-csi-driver": "https://github.com/juicedata/juicefs-csi-driver/releases",
    "rook-ceph": "https://rook.io/docs/rook/latest-release/Upgrade/rook-upgrade/",
    "rook-ceph-cluster": "https://rook.io/docs/rook/latest-release/Upgrade/rook-upgrade/",
    "ceph-csi-drivers": "https://github.com/ceph/ceph-csi-operator/releases",
    "topolvm": "https://github.com/topolvm/topolvm/blob/main/CHANGELOG.md",
    "cert-manager": "https://cert-manager.io/docs/releases/",
    "fluid": "https://github.com/fluid-cloudnative/fluid/releases",
    "volcano": "https://github.com/volcano-sh/volcano/releases",
    "kubeflow-trainer": "https://github.com/kubeflow/trainer/releases",
}
"""Where each chart's upgrade notes are (the runbook's chart upgrade section covers the rest)."""


def _objects(render: Render) -> Iterator[dict[str, Any]]:
    for r in render.resources:
        if r["type"].startswith("kubernetes:") and isinstance(r["inputs"].get("metadata"), dict):
            yield r["inputs"]


def secret_consumers(secret: dict[str, Any], render: Render) -> list[str]:
    """Who reads a Secret by name: pod templates (volumes, env, envFrom), StorageClasses (CSI secret
    parameters) and Fluid datasets (encryptOptions)."""
    name, namespace = secret["metadata"].get("name"), secret["metadata"].get("namespace")
    found = []
    for obj in _objects(render):
        meta = obj["metadata"]
        if obj.get("kind") == "StorageClass":
            params = obj.get("parameters") or {}
            refs = [k for k, v in params.items() if k.endswith("secret-name") and v == name]
            if any(params.get(k.replace("-name", "-namespace")) == namespace for k in refs):
                found.append(f"StorageClass/{meta['name']}")
        elif meta.get("namespace") == namespace and obj is not secret and _names_secret(obj, name):
            found.append(f"{obj.get('kind')}/{namespace}/{meta.get('name')}")
    return sorted(set(found))


def _names_secret(value: Any, name: str) -> bool:
    if isinstance(value, dict):
        if value.get("secretName") == name:
            return True
        for key in ("secretKeyRef", "secretRef", "secret"):
            if isinstance(value.get(key), dict) and value[key].get("name") == name:
                return True
        return any(_names_secret(v, name) for v in value.values())
    return isinstance(value, list) and any(_names_secret(v, name) for v in value)


def data_notes(
    change: Change, old: dict[str, Any] | None, new: dict[str, Any] | None, base: Render, head: Render
) -> None:
    """What the change means for data, for the reviewer (added to ``change.notes``)."""
    r = new or old
    assert r is not None
    kind = r["inputs"].get("kind") if r["type"].startswith("kubernetes:") else None
    if not unprotected(change, old, new):  # lifted: the protection notes would say the opposite
        change.notes += _protection_notes(change)
    change.notes += _loss_notes(change, kind, r["inputs"], base)
    if kind == "Secret" and change.action in ("replace", "update") and new is not None:
        change.notes += _secret_notes(change, secret_consumers(new["inputs"], head))
    if kind in NEW_VOLUMES_ONLY and old is not None and new is not None:
        change.notes += _field_notes(NEW_VOLUMES_ONLY[kind], old, new, NEW_VOLUMES_MEANING)
    if kind in NEXT_MOUNT_ONLY and old is not None and new is not None:
        change.notes += _field_notes(NEXT_MOUNT_ONLY[kind], old, new, NEXT_MOUNT_MEANING)
    if change.action == "replace" and kind == "Service":
        change.notes.append("deleted, then created under the same name: meanwhile the name resolves to nothing")
    elif change.action == "replace" and kind == "Job":
        change.notes.append("deleted, then created under the same name: the Job runs again")
    if (
        r["type"] == ELASTICACHE_GROUP
        and change.action == "update"
        and not (new or r)["inputs"].get("applyImmediately")
    ):
        change.notes.append(
            "ElastiCache applies this in the replication group's next maintenance window, not during `pulumi up` "
            "(metadata.elasticache.applyImmediately: false); until then the group runs as before"
        )
    if kind == "StorageClass" and _gains(old, new, "writeback"):
        change.moves_data = True  # not a move: acknowledged writes that can be lost
        change.notes.append(
            "mount option `writeback` turned on: JuiceFS acknowledges a write once it is in the node's cache and "
            "uploads it later; the cache is on the node's own disk, so a node that is replaced or loses its disk "
            "before the upload (EKS replaces nodes routinely; instance store is wiped on stop) loses writes the job "
            "was told were done. Acknowledge it in cluster.acknowledgeReplacements only for data you can recreate"
        )


def _gains(old: dict[str, Any] | None, new: dict[str, Any] | None, option: str) -> bool:
    """Whether a StorageClass's ``mountOptions`` gain ``option``."""
    before = (old or {}).get("inputs", {}).get("mountOptions") or []
    after = (new or {}).get("inputs", {}).get("mountOptions") or []
    return old is not None and option in after and option not in before


def volume_changes(base: Render, head: Render) -> list[Change]:
    """A JuiceFS volume renamed (``juicefs.volumeName``, the stack output ``juicefsVolume``): the volume's keys move
    to the new name's prefix while every block stays under the old one, so every read and write stops."""
    before = (base.outputs or {}).get("juicefsVolume")
    after = (head.outputs or {}).get("juicefsVolume")
    if not before or not after or before == after:
        return []
    change = Change(f"JuiceFSVolume/{after}", "ai-storage:juicefs:Volume", after, "update", moves_data=True)
    change.fields, change.values = ["juicefs.volumeName"], [f"`juicefs.volumeName` {before} -> {after}"]
    change.notes.append(
        f"the cold tier's volume is renamed {before} -> {after}: the volume Secret's `name` and the object-store "
        f"keys' prefix (IAM policy or MinIO/RGW user) move to `{after}/` while every existing block stays under "
        f"`{before}/` and the metadata still names `{before}`: after `pulumi up` every mount gets AccessDenied and "
        f"every cold-tier read and write stops. Keep `volumeName: {before}`; to really move the data, follow "
        f"{RUNBOOK_VOLUME} and then acknowledge `JuiceFSVolume/{after}` in cluster.acknowledgeReplacements"
    )
    return [change]


def _gone(change: Change) -> bool:
    return change.action in ("replace", "delete")


def unprotected(change: Change, old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
    """A resource whose ``protect`` or ``retainOnDelete`` is lifted blocks until acknowledged: from this update on,
    a replace or delete (a setting's change, ``pulumi destroy``) takes it and its data without a further word."""
    lifted = [o for o in ("protect", "retainOnDelete") if old and new and old.get(o) and not new.get(o)]
    if not lifted:
        return False
    change.moves_data = True  # not a move: the guard against losing it goes
    change.notes.append(
        f"{' and '.join(f'`{o}`' for o in lifted)} lifted: no longer protected; from this update on a replace or "
        "delete (a later setting change, a removed component, `pulumi destroy`) takes it"
        + (" and the data it holds" if change.holds_data else "")
        + " without stopping. Acknowledge it in cluster.acknowledgeReplacements"
    )
    return True


def _protection_notes(change: Change) -> list[str]:
    """What ``protect`` (and ``retainOnDelete``) does to this change."""
    if change.protected and _gone(change):
        return [
            "protected: `pulumi up` refuses to replace or delete it until `protect` is lifted; with retainOnDelete "
            "the old object stays in the cluster, unmanaged"
        ]
    if change.protected and change.action in ("update", "rejected"):
        return ["protected: `protect` stops replaces and deletes only; this changes it in place"]
    return []


def _loss_notes(change: Change, kind: str | None, inputs: dict[str, Any], base: Render) -> list[str]:
    """What a replace or delete does to the data: a StatefulSet's claims, a claim's volume, a Namespace's
    objects, or the data a resource holds."""
    if not _gone(change):
        return []
    if kind == "StatefulSet":
        policy = ((inputs.get("spec") or {}).get("persistentVolumeClaimRetentionPolicy") or {}).get("whenDeleted")
        claims = "deletes its claims and their data" if policy == "Delete" else "keeps its claims (whenDeleted: Retain)"
        return [f"every pod stops at once; the StatefulSet {claims}, the new one mounts them again by name"]
    if kind == "PersistentVolumeClaim":
        cls = (inputs.get("spec") or {}).get("storageClassName")
        policy = next(
            (
                o.get("reclaimPolicy", "Delete")
                for o in _objects(base)
                if o.get("kind") == "StorageClass" and o["metadata"].get("name") == cls
            ),
            "unknown",
        )
        return [
            f"the claim's volume is released (StorageClass {cls}: reclaimPolicy {policy}); a new claim "
            "binds a new, empty volume"
        ]
    if kind == "Namespace":
        return ["deleting a Namespace deletes every object in it, claims included"]
    if kind == "PersistentVolume":
        policy = (inputs.get("spec") or {}).get("persistentVolumeReclaimPolicy", "Delete")
        if policy == "Retain":
            return [
                "the PersistentVolume object goes; with reclaimPolicy Retain the data it names (a JuiceFS directory, "
                "a disk) stays on the backend, unreferenced: remove it by hand once nobody needs it"
            ]
    return ["holds data: deleting it deletes the data"] if change.holds_data else []


def _secret_notes(change: Change, users: list[str]) -> list[str]:
    """When the readers of a replaced or updated Secret see the change."""
    if change.action == "replace" and users:
        return [
            "deleted, then created under the same name: while it is gone, pods that start and volumes that "
            f"mount cannot read it; read by {', '.join(users)}"
        ]
    if users:
        return [
            f"updated in place; read by {', '.join(users)}: mounted keys change within the kubelet's sync, "
            "environment variables at the next restart, a CSI volume's settings at its next mount"
        ]
    return []


NEW_VOLUMES_MEANING = (
    "reaches only volumes provisioned from now on; existing volumes keep what they were created with until they are "
    "re-created (or their PV is edited and remounted)"
)
NEXT_MOUNT_MEANING = (
    "needs node action: a node takes it only when it mounts the volume again (JuiceFS: when the volume's mount pod "
    "there restarts, after every pod on the node that uses it has gone); pods running now keep the old options"
)


def _field_notes(fields: tuple[str, ...], old: dict[str, Any], new: dict[str, Any], meaning: str) -> list[str]:
    """The changed values of ``fields`` (old -> new), with what the change means for the volumes."""
    touched = [
        f"`{field_text(p)}` {value_text(a)} -> {value_text(b)}"
        for p, a, b in changed_leaves(old["inputs"], new["inputs"])
        if field_text(p).startswith(fields)
    ]
    return [f"{', '.join(touched)}: {meaning}"] if touched else []


def chart_notes(base: Render, head: Render) -> list[str]:
    """A line per Helm release whose chart version changes, with its upgrade notes."""
    old = {r["name"]: r["inputs"] for r in base.resources if r["type"] == RELEASE}
    notes = []
    for r in head.resources:
        before = old.get(r["name"])
        if r["type"] == RELEASE and before and before.get("version") != r["inputs"].get("version"):
            chart = str(r["inputs"].get("chart", "")).rsplit("/", 1)[-1]
            url = CHART_NOTES.get(chart, "the chart's release notes")
            notes.append(
                f"chart {chart} {before.get('version')} -> {r['inputs'].get('version')}: read its upgrade notes "
                f"({url}) and {RUNBOOK_CHART} (CRDs, hooks)"
            )
    return notes


def engine(render: Render) -> str | None:
    """The metadata engine a render deploys: its ``metadataEngine`` output, or for a render from before
    outputs.json (0.1.0, when one Redis was the only engine) ``standalone`` if it has a MetadataEngine."""
    if render.outputs is not None:
        return previous_engine(render.outputs)
    has = any(r["type"] == "ai-storage:metadata_engine:MetadataEngine" for r in render.resources)
    return "standalone" if has else None


def engine_notes(base: Render, head: Render) -> list[str]:
    before, after = engine(base), engine(head)
    if before is None or after is None or before == after:
        return []
    risk = " (with `metadata.acceptNodeLossRisk: true`)" if before == "standalone" else ""
    return [
        f"metadata engine {before} -> {after}: every cold-tier file's metadata stays in the {before} engine. A "
        f"protected stack's `pulumi up` refuses this until either the metadata is moved ({RUNBOOK_ENGINE}) and "
        f"`metadata.migratedFrom: {before}` is set, or `metadata.engine: {before}` is pinned{risk}"
    ]


def namespace_deletion_notes(changes: list[Change]) -> None:
    """A deleted object whose Namespace is deleted in the same update goes with it, whatever its own
    ``retainOnDelete`` says: its notes say so instead of "stays in the cluster"."""
    gone = {c.id.split("/", 1)[1] for c in changes if c.id.startswith("Namespace/") and _gone(c) and not c.protected}
    for c in changes:
        parts = c.id.split("/")
        if len(parts) == 3 and parts[1] in gone and _gone(c):
            c.notes = [n for n in c.notes if not n.startswith("protected:")] + [
                f"its Namespace {parts[1]} is deleted in the same update: Kubernetes deletes it with the Namespace "
                "(retainOnDelete keeps nothing inside a deleted Namespace)"
            ]
