"""Capacity: what the stack promises on each tier against what its disks hold, refused when it does not add up.

Promised on a tier: every vended team's quota of it (``teams.workspaces[].quota``), the training checkpoint claim
(checkpoint tier) and an acceptance claim per tested tier. Held, per backend, from the hardware the stack states
(``capacity``): a Ceph pool keeps ``replicaSize`` copies on the OSDs of its device class, and Ceph warns at its
``mon_osd_nearfull_ratio`` (0.85) and stops writes at 0.95, so a class holds raw / replicaSize x 0.85 (pools on
every OSD share the sum of all classes); the hot tier is TopoLVM's volume group on each NVMe node less the node
cache volume carved from it; an object store on S3 has no bound, MinIO its volume, Ceph RGW the Ceph class its
pools use. A backend whose hardware the stack does not state is shown, not checked. docs/tiers.md shows each stack's
table (``capacity_rows``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from ..common.kube import gib_text, quantity_bytes
from ..common.sections import DnsLabel, Problem, Quantity, Section
from .ceph import filesystem_class
from .storage_tiers import TIERS

NEARFULL_RATIO = 0.85
"""Ceph's ``mon_osd_nearfull_ratio`` (default): past it the cluster is in HEALTH_WARN; at 0.95 writes stop."""


class CapacitySettings(Section):
    """What the cluster's disks hold, for the capacity arithmetic; a backend left unset is not checked."""

    ceph_raw: dict[DnsLabel, Quantity] = {}
    """Raw capacity of the Ceph OSDs of each device class (`ssd: 92Ti`, `nvme: 42Ti`)."""
    nvme_nodes: int | None = Field(None, ge=1, le=100_000)
    """Nodes with the hot tier's TopoLVM volume group (`localNvme.nodeSelector`'s)."""
    volume_group_gib: int | None = Field(None, ge=1, le=10_000_000)
    """Size of that volume group on each of them, GiB (the node cache volume is carved from it)."""


@dataclass
class Group:
    """Tiers that share one store, what they are promised and what the store holds."""

    name: str
    capacity: float | None
    """Usable bytes; None: not stated (or no bound)."""
    held: str
    """How ``capacity`` follows from the settings, in words."""
    key: str
    """The setting that states the store's size (named by a refusal)."""
    promised: list[tuple[str, float]] = field(default_factory=list)


def promised(s: Any) -> dict[str, list[tuple[str, float]]]:
    """What the stack promises on each tier: (what, bytes)."""
    out: dict[str, list[tuple[str, float]]] = {tier: [] for tier in TIERS}
    for team in s.teams.workspaces:
        for tier, quota in team.quota.tiers.items():
            if quota.storage is not None:
                out[tier].append((f"team {team.name}'s quota", float(quantity_bytes(quota.storage))))
    if s.training.enabled:
        out["checkpoint"].append(("training.checkpointSize", float(quantity_bytes(s.training.checkpoint_size))))
    if s.acceptance.enabled:
        for tier in TIERS:
            out[tier].append(("acceptance.volumeSize", float(quantity_bytes(s.acceptance.volume_size))))
    return out


def groups(s: Any) -> dict[str, Group]:
    """Each store of the stack's tiers, with the tiers' promises added up."""
    out: dict[str, Group] = {}
    for tier, things in promised(s).items():
        backend = getattr(s.tiers, tier)
        if backend == "none":
            continue
        group = _store(s, tier, backend)
        out.setdefault(group.name, group).promised.extend((f"{tier}: {what}", size) for what, size in things)
    return out


def _store(s: Any, tier: str, backend: str) -> Group:
    c, ceph = s.capacity, s.rook_ceph
    if backend in ("cephfs", "rbd") or (backend == "juicefs" and s.object_store.backend == "ceph-rgw"):
        cls = filesystem_class(ceph, "checkpoint" if tier == "checkpoint" and backend == "cephfs" else "warm")
        sizes = [quantity_bytes(v) for k, v in c.ceph_raw.items() if cls is None or k == cls]
        raw = sum(sizes) if sizes else None
        where = f"Ceph OSDs of class {cls}" if cls else "every Ceph OSD"
        usable = raw / ceph.replica_size * NEARFULL_RATIO if raw else None
        held = f"{gib_text(raw)} raw / {ceph.replica_size} copies x {NEARFULL_RATIO}" if raw else "not stated"
        return Group(where, usable, held, f"capacity.cephRaw.{cls}" if cls else "capacity.cephRaw")
    if backend == "topolvm":
        cache = s.local_nvme.cache_volume.size_gib if s.local_nvme.cache_volume.enabled else 0
        if c.nvme_nodes is None or c.volume_group_gib is None:
            return Group("TopoLVM volume groups", None, "not stated", "capacity.volumeGroupGib")
        usable = c.nvme_nodes * (c.volume_group_gib - cache) * 2.0**30
        held = f"{c.nvme_nodes} nodes x ({c.volume_group_gib} GiB - the {cache} GiB node cache volume)"
        return Group("TopoLVM volume groups", usable, held, "capacity.volumeGroupGib")
    store = s.object_store.backend
    if store == "minio":
        size = s.object_store.minio.storage_size
        return Group("MinIO", float(quantity_bytes(size)), f"its volume, {size}", "objectStore.minio.storageSize")
    return Group(f"object store ({store})", None, "no bound", "objectStore.backend")


def capacity_problems(s: Any) -> list[Problem]:
    """Each store holds what the stack promises on it, and the node cache volume fits its volume group."""
    found = []
    for group in groups(s).values():
        total = sum(size for _, size in group.promised)
        if group.capacity is None or total <= group.capacity:
            continue
        held = gib_text(group.capacity)
        parts = " + ".join(f"{gib_text(size)} ({what})" for what, size in group.promised)
        expected = f"expected {group.name} to hold {parts} = {gib_text(total)}: {group.held} = {held}"
        hint = "add disks (and say so here), lower the teams' quotas (teams.quota) or the claims, or move a tier"
        found.append(Problem(group.key, expected, held, hint))
    nvme, group_gib = s.local_nvme, s.capacity.volume_group_gib
    home = nvme.cache_volume if nvme.enabled and nvme.cache_volume.enabled else None
    if home is not None and group_gib is not None and home.size_gib >= group_gib:
        hint = "the hot tier's volumes come out of the same volume group: shrink the cache volume"
        expected = f"expected less than the volume group (capacity.volumeGroupGib {group_gib})"
        found.append(Problem("localNvme.cacheVolume.sizeGib", expected, home.size_gib, hint))
    return found


def capacity_rows(s: Any) -> list[str]:
    """The stack's capacity table (markdown rows: store, promised, held, left)."""
    rows = []
    for group in groups(s).values():
        total = sum(size for _, size in group.promised)
        parts = "; ".join(f"{what} {gib_text(size)}" for what, size in group.promised) or "nothing"
        held = f"{group.held} = {gib_text(group.capacity)}" if group.capacity is not None else group.held
        left = gib_text(group.capacity - total) if group.capacity is not None else "not checked"
        rows.append(f"| {group.name} | {parts} (total {gib_text(total)}) | {held} | {left} |")
    return rows
