"""What changing each platform setting does to the data, decided once: ``EFFECTS`` classifies every key path of
the settings tree (``[]`` for an entry of a list or mapping), first matching pattern first. The diff reads it
(``python -m components diff``: a note per changed setting, a block where the change moves data, stops I/O or can
lose acknowledged writes) and the config reference shows it; a test fails on any path it leaves undecided."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any


class Effect(Enum):
    """The classes of a setting's effect on data."""

    SAFE = "in place"
    COST = "cost only"
    NODE_ACTION = "needs node action"
    REPLACES = "replaces"
    MOVES_DATA = "moves data"
    STOPS_IO = "stops I/O"
    LOSES_WRITES = "can lose acknowledged writes"

    @property
    def blocks(self) -> bool:
        """Whether the diff blocks a change of this class until it is acknowledged."""
        return self in (Effect.MOVES_DATA, Effect.STOPS_IO, Effect.LOSES_WRITES)


Test = Callable[[Any, Any], bool]
"""Whether a change from the old to the new value has the effect (a setting harmful in one direction only)."""


def _off(old: Any, new: Any) -> bool:
    return bool(old) and not new


def _on(old: Any, new: Any) -> bool:
    return not old and bool(new)


def _raised(old: Any, new: Any) -> bool:
    return old is not None and new is not None and new > old


def _lowered(old: Any, new: Any) -> bool:
    return old is not None and new is not None and new < old


def _replaced(old: Any, new: Any) -> bool:
    return old is not None and old != new


def _weaker_fsync(old: Any, new: Any) -> bool:
    return old == "always" and new != "always"


def _gains_writeback(old: Any, new: Any) -> bool:
    return "writeback" in (new or []) and "writeback" not in (old or [])


def _loses_entries(old: Any, new: Any) -> bool:
    return any(entry not in (new or []) for entry in old or [])


@dataclass(frozen=True)
class Entry:
    """One decision: the key paths it covers, their effect and why."""

    pattern: str
    """A key path; ``*`` stands for any run of characters."""
    effect: Effect
    why: str
    when: Test | None = None
    """The changes that block (None: every change of a class that blocks)."""
    shown_by: tuple[str, ...] = ()
    """Resource types whose own rule in the diff blocks the change, naming the object (no second block)."""

    def blocks(self, old: Any, new: Any) -> bool:
        return self.effect.blocks if self.when is None else self.when(old, new)


CEPH_POOLS = tuple(f"kubernetes:ceph.rook.io/v1:{k}" for k in ("CephBlockPool", "CephFilesystem", "CephObjectStore"))
STORAGE_CLASS = "kubernetes:storage.k8s.io/v1:StorageClass"
ROLLS = "rolls the pods (a single replica pauses for its restart)"
NEW_NAME = "a new name is a new object: the old one, and what it holds, is deleted (the diff blocks what holds data)"
LVMD_FORGETS = "lvmd forgets the old class: its volumes cannot mount or be deleted"
CHECKS = "read by the render's checks only"
MOUNTS = "a mount option: each node's mounts take it when they mount again (restart the mount pods or drain)"
E = Effect
EFFECTS: tuple[Entry, ...] = (
    Entry("profile", E.SAFE, "the profile's values show as the settings they change"),
    Entry("cluster.kubeconfig", E.REPLACES, "another cluster: pulumi-kubernetes creates everything there anew"),
    Entry("cluster.context", E.REPLACES, "another cluster: pulumi-kubernetes creates everything there anew"),
    Entry(
        "cluster.protectStatefulResources",
        E.SAFE,
        "lifting it leaves deletes unguarded: the diff blocks each resource whose protect or retainOnDelete goes",
    ),
    Entry("cluster.acknowledgeReplacements", E.SAFE, "read by the diff only"),
    Entry("cluster.*", E.SAFE, CHECKS),
    Entry("rookCeph.resources.*", E.COST, f"{ROLLS}; Ceph restarts its daemons one at a time"),
    Entry("*esources*", E.COST, ROLLS),
    Entry("objectStore.backend", E.STOPS_IO, "another store: every block stays in the old one; copy it first"),
    Entry("objectStore.bucket", E.STOPS_IO, "another bucket: every block stays in the old one; copy it first"),
    Entry("objectStore.namespace", E.REPLACES, NEW_NAME),
    Entry("objectStore.minio.replicas", E.STOPS_IO, "MinIO's erasure set is fixed at first start: it will not start"),
    Entry("objectStore.minio.storage*", E.REPLACES, "the StatefulSet's volume claim template: replaced with its data"),
    Entry("objectStore.s3.region", E.REPLACES, "a bucket in another region is a new bucket"),
    Entry("objectStore.s3.noncurrentVersionDays", E.COST, "old versions expire sooner or later: less or more to undo"),
    Entry(
        "objectStore.s3.kmsKeyArn",
        E.STOPS_IO,
        "objects written before keep the old key, which the scopes may no longer use: they cannot be read",
        _replaced,
    ),
    Entry("objectStore.s3.*Arn", E.SAFE, "the pods' IAM trust; a wrong one refuses their keys"),
    Entry("objectStore.s3.serviceAccounts", E.SAFE, "the pods' IAM trust; a wrong one refuses their keys"),
    Entry("objectStore.s3.*", E.COST, "S3 lifecycle: objects change storage class, all instantly readable"),
    Entry("metadata.flavor", E.STOPS_IO, "another server: move the metadata first (runbook)"),
    Entry("metadata.engine", E.STOPS_IO, "another engine: move the metadata first (runbook)"),
    Entry("metadata.namespace", E.REPLACES, NEW_NAME),
    Entry("metadata.storage*", E.REPLACES, "the StatefulSet's volume claim template: replaced with its data"),
    Entry("metadata.database", E.STOPS_IO, "another Redis database: the volume's metadata stays in the old one"),
    Entry(
        "metadata.appendfsync", E.LOSES_WRITES, "everysec loses up to a second of metadata on a crash", _weaker_fsync
    ),
    Entry("metadata.maxmemoryPercent", E.STOPS_IO, "a lower limit refuses metadata writes sooner", _lowered),
    Entry("metadata.sentinel.masterName", E.STOPS_IO, "mounts ask Sentinel for the old name until they remount"),
    Entry(
        "metadata.sentinel.minReplicasToWrite", E.STOPS_IO, "the primary refuses writes with fewer replicas", _raised
    ),
    Entry("metadata.sentinel.client*", E.NODE_ACTION, MOUNTS),
    Entry("metadata.sentinel.replicas", E.COST, "replicas added or removed one at a time"),
    Entry("metadata.sentinel.spread", E.SAFE, f"placement: {ROLLS}; Sentinel fails over"),
    Entry("metadata.sentinel.*", E.SAFE, "failover timing, in place"),
    Entry("metadata.elasticache.kmsKeyId", E.REPLACES, "the group is created anew (the diff blocks it as the group)"),
    Entry(
        "metadata.elasticache.engineVersion",
        E.SAFE,
        "an upgrade in place (at the maintenance window unless immediate); a downgrade creates the group anew "
        "(the diff blocks it as the group)",
    ),
    Entry("metadata.elasticache.subnetIds", E.SAFE, "the subnet group, in place; AWS refuses removing a used subnet"),
    Entry("metadata.elasticache.nodeType", E.SAFE, "AWS scales online (at the maintenance window unless immediate)"),
    Entry("metadata.elasticache.snapshot*", E.COST, "how many daily snapshots are kept, and when they are taken"),
    Entry("metadata.elasticache.replicas", E.COST, "replicas added or removed online"),
    Entry("metadata.*Percent", E.SAFE, "an alarm level"),
    Entry("metadata.*", E.SAFE, "in place"),
    Entry("juicefs.enabled", E.STOPS_IO, "the CSI driver and the cold tier's classes go: every mount stops", _off),
    Entry("juicefs.namespace", E.REPLACES, NEW_NAME),
    Entry(
        "juicefs.volumeName",
        E.STOPS_IO,
        "the keys move to the new prefix while every block stays under the old one (runbook)",
        shown_by=("ai-storage:juicefs:Volume",),
    ),
    Entry(
        "juicefs.cache.writeback",
        E.LOSES_WRITES,
        "writes acknowledged from a node's cache are lost with the node before the upload",
        _on,
        shown_by=(STORAGE_CLASS,),
    ),
    Entry(
        "juicefs.cache.extraMountOptions",
        E.LOSES_WRITES,
        f"{MOUNTS}; gaining writeback loses writes a lost node had not uploaded",
        _gains_writeback,
        shown_by=(STORAGE_CLASS,),
    ),
    Entry("juicefs.cache.cacheDir", E.NODE_ACTION, f"{MOUNTS}; the old directory's cache stays until removed"),
    Entry("juicefs.cache.*", E.NODE_ACTION, MOUNTS),
    Entry("juicefs.metadataBackup.*", E.COST, "how often the metadata is dumped and how long dumps are kept"),
    Entry("tiers.namePrefix", E.REPLACES, "every StorageClass under a new name; claims that name the old ones fail"),
    Entry("tiers.blockReclaimPolicy", E.REPLACES, "a StorageClass field: the class is replaced, new volumes only"),
    Entry("tiers.defaultTier", E.SAFE, "which class a claim without one gets; existing claims keep theirs"),
    Entry("tiers.decisions.*", E.SAFE, CHECKS),
    Entry("tiers.deviceSpeeds*", E.SAFE, CHECKS),
    Entry("tiers.*", E.REPLACES, "another backend's StorageClass; existing volumes stay where they are"),
    Entry("rookCeph.enabled", E.STOPS_IO, "the Ceph cluster goes: every warm, checkpoint and block volume stops", _off),
    Entry("rookCeph.namespace", E.REPLACES, NEW_NAME),
    Entry("rookCeph.dataDirHostPath", E.STOPS_IO, "the monitors' stores stay in the old directory: Ceph cannot start"),
    Entry("rookCeph.replicaSize", E.MOVES_DATA, "Ceph makes or drops a copy of every object"),
    Entry("rookCeph.minSize", E.STOPS_IO, "with fewer copies up than min_size a pool's I/O stops", _raised),
    Entry("rookCeph.failureDomain", E.MOVES_DATA, "the pools' CRUSH rule: copies re-spread", shown_by=CEPH_POOLS),
    Entry("rookCeph.deviceClass", E.MOVES_DATA, "the pools' CRUSH rule: every object moves", shown_by=CEPH_POOLS),
    Entry(
        "rookCeph.checkpoint.deviceClass",
        E.MOVES_DATA,
        "the pool's CRUSH rule: every object moves",
        shown_by=CEPH_POOLS,
    ),
    Entry(
        "rookCeph.checkpoint.shareWarmDevices",
        E.MOVES_DATA,
        "the checkpoint pools' CRUSH rule: every object moves",
        shown_by=CEPH_POOLS,
    ),
    Entry("rookCeph.storage.zones", E.SAFE, "checked against failureDomain zone; spreads the monitors one per zone"),
    Entry("rookCeph.storage.*", E.MOVES_DATA, "OSDs added or left out: Ceph rebalances placement groups"),
    Entry("rookCeph.blockPool", E.REPLACES, NEW_NAME),
    Entry("rookCeph.*Filesystem", E.REPLACES, NEW_NAME),
    Entry("rookCeph.rgw.name", E.REPLACES, NEW_NAME),
    Entry("rookCeph.rgw.port", E.NODE_ACTION, "clients reach the new port once they mount again"),
    Entry("rookCeph.rgw.instances", E.COST, "gateways added or removed"),
    Entry("rookCeph.*mds.*", E.SAFE, "MDS ranks added or stopped one at a time (metadata I/O pauses at failover)"),
    Entry("rookCeph.toolbox.*", E.COST, "the toolbox pod"),
    Entry("rookCeph.cleanupPolicy.*", E.SAFE, "acts only when the cluster is deleted (acceptDataDestructionOnDelete)"),
    Entry("rookCeph.accept*", E.SAFE, "an acknowledgement the render's checks read"),
    Entry("rookCeph.*", E.SAFE, "in place (Rook adds or removes daemons one at a time)"),
    Entry("localNvme.enabled", E.STOPS_IO, "TopoLVM goes: every hot-tier volume stops", _off),
    Entry("localNvme.namespace", E.REPLACES, NEW_NAME),
    Entry("localNvme.certManagerNamespace", E.REPLACES, NEW_NAME),
    Entry("localNvme.nodeSelector", E.STOPS_IO, "nodes it leaves lose the node plugin: their volumes cannot mount"),
    Entry("localNvme.deviceClasses[].spareGb", E.SAFE, "free space TopoLVM keeps back"),
    Entry("localNvme.deviceClasses[].default", E.SAFE, "which class a claim without one gets"),
    Entry("localNvme.deviceClasses[].thinPool*", E.NODE_ACTION, "the thin pool must exist on every node"),
    Entry("localNvme.deviceClasses", E.STOPS_IO, LVMD_FORGETS, _loses_entries),
    Entry("localNvme.deviceClasses[]*", E.STOPS_IO, LVMD_FORGETS),
    Entry(
        "localNvme.cacheVolume.sizeGib",
        E.NODE_ACTION,
        "each node's volume grows online as the node-cache pods roll; a smaller size is never applied to a node, "
        "so a shrink blocks (runbook: shrink the node cache volume)",
        _lowered,
    ),
    Entry("localNvme.cacheVolume.*", E.NODE_ACTION, "the node-cache pod prepares the volume again; caches refill"),
    Entry("localNvme.*", E.COST, "controller replicas and webhooks"),
    Entry(
        "efs.enabled",
        E.REPLACES,
        "its tiers' StorageClasses go; bound volumes keep mounting (the EKS add-on stays), new claims fail",
    ),
    Entry("efs.*", E.REPLACES, "a StorageClass field: the class is replaced, new access points only"),
    Entry(
        "fsxLustre.enabled",
        E.REPLACES,
        "its tiers' StorageClasses go; bound file systems keep mounting (the EKS add-on stays), new claims fail",
    ),
    Entry("fsxLustre.*", E.REPLACES, "a StorageClass field: the class is replaced, new file systems only"),
    Entry("acceptance.namespace", E.REPLACES, NEW_NAME),
    Entry("acceptance.volumeSize", E.REPLACES, "each tier's acceptance claim is made again (test data only)"),
    Entry("acceptance.*", E.SAFE, "the acceptance Jobs run again (test data only)"),
    Entry("volcano.enabled", E.REPLACES, "the gang scheduler goes: Volcano jobs stop being scheduled"),
    Entry("volcano.namespace", E.REPLACES, NEW_NAME),
    Entry("volcano.controllers.*", E.COST, ROLLS),
    Entry("volcano.*", E.SAFE, "queue limits, in place: running gangs finish, new ones wait"),
    Entry("training.enabled", E.REPLACES, "the training operators go: their jobs stop"),
    Entry("training.*amespace", E.REPLACES, NEW_NAME),
    Entry("training.checkpointClaim", E.REPLACES, f"{NEW_NAME}; a resume finds no checkpoint"),
    Entry("training.checkpointSize", E.SAFE, "the claim grows in place; the API server refuses a shrink"),
    Entry("training.controllers.*", E.COST, ROLLS),
    Entry("training.*", E.SAFE, "runtimes and operators for new jobs; running jobs keep theirs"),
    Entry("fluid.enabled", E.REPLACES, "Fluid goes: its datasets and their caches"),
    Entry("fluid.namespace", E.REPLACES, NEW_NAME),
    Entry("fluid.datasets[].cache*", E.NODE_ACTION, "the runtime's cache levels change when its workers restart"),
    Entry("fluid.datasets[].replicas", E.COST, "cache workers added or removed"),
    Entry("fluid.datasets[].prewarm*", E.SAFE, "what is loaded into the cache"),
    Entry("fluid.datasets[].warmupSchedule", E.SAFE, "when the cache is loaded"),
    Entry("fluid.datasets*", E.REPLACES, "the dataset and its runtime are made again: the cache starts cold"),
    Entry("fluid.controllers.*", E.COST, ROLLS),
    Entry("fluid.*", E.SAFE, "placement of new pods"),
    Entry("checkpoints.*", E.COST, "how many copies are kept, and how often they are made"),
    Entry(
        "teams.*quota.*",
        E.SAFE,
        "a quota in place; below what a team uses, new claims are refused and existing ones stay (the render cannot "
        "see use: `kubectl describe resourcequota -n <team>`)",
    ),
    Entry("teams.workspaces[].io.*", E.NODE_ACTION, MOUNTS),
    Entry("teams.workspaces[].offsite", E.COST, "whether its checkpoints get an offsite copy"),
    Entry("teams.workspaces[].n*", E.REPLACES, f"{NEW_NAME} (the team's namespace: runbook, retire a team)"),
    Entry("teams.workspaces", E.REPLACES, "teams added or retired (retiring one: runbook, retire a team)"),
    Entry("teams.workspaces[].space", E.SAFE, "the space claim grows in place; the API server refuses a shrink"),
    Entry("teams.*", E.SAFE, "what a team may read and use, in place"),
    Entry("monitoring.*", E.SAFE, "alerts, dashboards and scraping"),
    Entry("networkPolicies.*", E.SAFE, "who may talk to the platform's pods; a client the policies miss stops"),
    Entry(
        "nodeStorage.tolerations*",
        E.STOPS_IO,
        "the storage node plugins leave nodes they no longer tolerate: volumes there cannot mount",
        _loses_entries,
    ),
    Entry("sources.*", E.SAFE, "where charts and manifests come from; the same versions"),
    Entry("capacity.*", E.SAFE, CHECKS),
)


@cache
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(re.escape(pattern).replace(r"\*", ".*"))


def entry_of(path: str) -> Entry | None:
    """The decision for a key path (``[]`` for a list or mapping entry), or None where none is made."""
    return next((e for e in EFFECTS if _regex(e.pattern).fullmatch(path)), None)
